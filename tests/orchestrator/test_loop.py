"""CoordinatorLoop: hinted cycles run at once while they move something, and a cycle that moved
nothing spaces the next hinted one out by its own duration."""

from __future__ import annotations

import asyncio

from sokovan.orchestrator.loop import CoordinatorLoop

CYCLE = 0.3


async def _run_hinted(moves: bool, seconds: float) -> int:
    cycles = 0

    async def cycle() -> bool:
        nonlocal cycles
        cycles += 1
        await asyncio.sleep(CYCLE)
        return moves

    loop = CoordinatorLoop("test", cycle, long_interval=lambda: 3600, on_moved=lambda: None)
    stop = asyncio.Event()
    runner = asyncio.create_task(loop.run(stop))
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        loop.hint()  # a hint every 10 ms, as a stream of creates would send
        await asyncio.sleep(0.01)
    stop.set()
    await runner
    return cycles


async def test_fruitless_hinted_cycles_take_at_most_half_the_lane() -> None:
    # 1.3 s of hints: without spacing 5 cycles of 0.3 s would run back to back.
    assert await _run_hinted(moves=False, seconds=1.3) <= 3


async def test_a_cycle_that_moved_something_is_followed_at_once() -> None:
    assert await _run_hinted(moves=True, seconds=1.3) >= 4


async def _started_after_hint(debounce: float, busy_for: float) -> tuple[float, int]:
    """Seconds from a hint to its cycle's start when the lane's last cycle ended `busy_for` ago
    (a very long value: the lane was idle), and how many cycles ten more hints within 1 ms made."""
    starts: list[float] = []
    started = asyncio.Event()

    async def cycle() -> bool:
        starts.append(asyncio.get_running_loop().time())
        started.set()
        return False

    async def hinted_start() -> float:
        started.clear()
        at = asyncio.get_running_loop().time()
        loop.hint()
        await asyncio.wait_for(started.wait(), 5)
        return starts[-1] - at

    loop = CoordinatorLoop("test", cycle, long_interval=lambda: 3600, debounce=lambda: debounce)
    stop = asyncio.Event()
    runner = asyncio.create_task(loop.run(stop))
    await asyncio.sleep(0.01)
    if busy_for < 1:
        await hinted_start()
        await asyncio.sleep(busy_for)
    before = len(starts)
    delay = await hinted_start()
    for _ in range(10):
        loop.hint()
    await asyncio.sleep(debounce * 3 + 0.05)
    stop.set()
    await runner
    return delay, len(starts) - before - 1


async def test_a_hint_to_an_idle_lane_runs_at_once_and_a_burst_makes_one_cycle() -> None:
    delay, burst = await _started_after_hint(debounce=0.2, busy_for=3600)
    assert delay < 0.1  # not the 0.2 s debounce
    assert burst == 1  # ten hints right after a cycle: one more cycle
    delay, _ = await _started_after_hint(debounce=0.2, busy_for=0.0)
    assert delay >= 0.15  # right after a cycle: the rest of the debounce
