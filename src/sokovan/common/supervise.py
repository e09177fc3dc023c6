"""Supervised background tasks: restarted with backoff when they fail, fatal when they cannot go on.

A daemon's background tasks (an event consumer, a config watcher, a hints listener, the
orchestrator) must outlive an outage of PostgreSQL, Redis or etcd. `supervise` runs one until the
daemon's stop: when it raises, the error is logged and the task started again after a backoff
(0.1 s doubling to 5 s, with jitter; back to 0.1 s once the task ran `HEALTHY_AFTER` seconds
without failing). An outage (`common.outages.is_outage`) is retried for as long as it lasts. Any
other error is retried too, but `FAULT_LIMIT` of them in a row without a healthy period, a task
that returns although nobody asked it to stop, or a `Fatal` it raises, end the supervision with
`TaskFailed`: the daemon then stops and exits non-zero, saying why in one line.

`wait_for_service` is the start-up side: it repeats a probe until the service answers, logging one
line per failed attempt, for as long as the service is away.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import structlog

from sokovan.common.outages import is_outage

log = structlog.get_logger(__name__)

T = TypeVar("T")

FIRST_DELAY = 0.1
MAX_DELAY = 5.0
HEALTHY_AFTER = 30.0  # seconds a task runs without failing before its backoff starts again at 0.1 s
PROBE_TIMEOUT = 5.0  # seconds a start-up probe may take
FAULT_LIMIT = 5  # errors in a row that are not outages before a task is given up


class Fatal(Exception):
    """Raised by a task that cannot go on (e.g. a setting it found invalid): no restart."""


class TaskFailed(RuntimeError):
    """A supervised task was given up; `str()` is the one-line reason the daemon exits with."""


@dataclass
class Backoff:
    """Exponential delays with full jitter in [delay/2, delay]; `reset()` after a success."""

    first: float = FIRST_DELAY
    cap: float = MAX_DELAY
    _next: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self._next = self.first

    def reset(self) -> None:
        self._next = self.first

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self.cap, self._next * 2)
        return random.uniform(delay / 2, delay)

    async def sleep(self, stop: asyncio.Event | None = None) -> bool:
        """Wait the next delay; True when `stop` was set meanwhile (the caller should end)."""
        delay = self.next_delay()
        if stop is None:
            await asyncio.sleep(delay)
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        return stop.is_set()


def describe(exc: BaseException) -> str:
    """An error in one line: its type and its first line of text."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


async def supervise(
    name: str,
    run: Callable[[asyncio.Event], Awaitable[None]],
    stop: asyncio.Event,
    *,
    healthy_after: float = HEALTHY_AFTER,
    fault_limit: int = FAULT_LIMIT,
    backoff: Backoff | None = None,
) -> None:
    """`run(stop)` until `stop` is set, restarting it after errors; `TaskFailed` when given up."""
    delays = backoff or Backoff()
    faults = 0
    while not stop.is_set():
        began = time.monotonic()
        try:
            await run(stop)
        except Fatal as exc:
            raise TaskFailed(f"{name}: {describe(exc)}") from exc
        except Exception as exc:
            if time.monotonic() - began >= healthy_after:
                delays.reset()
                faults = 0
            outage = is_outage(exc)
            faults = 0 if outage else faults + 1
            if faults >= fault_limit:
                raise TaskFailed(f"{name} failed {faults} times in a row: {describe(exc)}") from exc
            log.warning("task.restarting", task=name, outage=outage, error=describe(exc), exc_info=not outage)
            if await delays.sleep(stop):
                return
            continue
        if not stop.is_set():
            raise TaskFailed(f"{name} ended although the daemon was not stopping")


async def wait_for_service(name: str, probe: Callable[[], Awaitable[T]], stop: asyncio.Event) -> T | None:
    """`probe()` until it answers (its result), retrying outages with backoff for as long as they
    last; None when `stop` is set first. Any other error is not waited out: it propagates."""
    delays = Backoff(cap=MAX_DELAY)
    attempt = 0
    while not stop.is_set():
        attempt += 1
        try:
            return await asyncio.wait_for(probe(), PROBE_TIMEOUT)
        except Exception as exc:
            if not is_outage(exc):
                raise
            log.warning("service.waiting", service=name, attempt=attempt, error=describe(exc))
        if await delays.sleep(stop):
            return None
    return None
