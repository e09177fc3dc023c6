"""`Throttle`: a lone request is flushed at once, a burst within the window is one more flush after
it, and what is asked for while a flush runs is never left behind."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sokovan.common.throttle import Throttle


class Flushes:
    def __init__(self, window: float) -> None:
        self.pending: list[int] = []
        self.done: list[list[int]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.changed = asyncio.Event()
        self.throttle = Throttle(self.flush, window)

    def ask(self, item: int) -> None:
        self.pending.append(item)
        self.throttle.soon()

    async def flush(self) -> None:
        taken, self.pending = self.pending, []
        self.changed.set()
        await self.gate.wait()
        self.done.append(taken)
        self.changed.set()

    async def until(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(10):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()


async def test_a_lone_request_is_flushed_without_waiting_for_the_window() -> None:
    flushes = Flushes(window=3600)  # a flush held back by the window would never come here
    flushes.ask(1)
    await flushes.until(lambda: flushes.done == [[1]])


async def test_requests_within_the_window_go_together_in_one_flush_after_it() -> None:
    flushes = Flushes(window=0.3)
    flushes.ask(1)
    await flushes.until(lambda: flushes.done == [[1]])
    for item in (2, 3, 4):
        flushes.ask(item)
    assert flushes.done == [[1]]  # held for the rest of the window
    await flushes.until(lambda: len(flushes.done) == 2)
    assert flushes.done == [[1], [2, 3, 4]]


async def test_a_request_made_while_a_flush_runs_gets_a_flush_of_its_own() -> None:
    flushes = Flushes(window=0.05)
    flushes.gate.clear()
    flushes.ask(1)
    await flushes.until(lambda: flushes.pending == [])  # the first flush took it and is under way
    flushes.ask(2)
    flushes.gate.set()
    await flushes.until(lambda: flushes.done == [[1], [2]])
