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
