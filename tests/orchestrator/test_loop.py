"""CoordinatorLoop: hinted cycles run at once while they move something, and a cycle that moved
nothing spaces the next one hinted by demand only out by its own duration; any other hint ends
that spacing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from prometheus_client import REGISTRY
from sqlalchemy.ext.asyncio import create_async_engine

from sokovan.bus.hints import Hint, as_demand, parse_demand
from sokovan.common.rpc import AgentRPCClient
from sokovan.config.cluster import ClusterConfig
from sokovan.orchestrator.loop import CoordinatorLoop
from sokovan.orchestrator.orchestrator import RETRY_DEBOUNCE, SokovanOrchestrator

CYCLE = 0.3


async def _run_hinted(moves: bool, seconds: float, long_interval: float = 3600) -> int:
    cycles = 0

    async def cycle() -> bool:
        nonlocal cycles
        cycles += 1
        await asyncio.sleep(CYCLE)
        return moves

    loop = CoordinatorLoop("test", cycle, long_interval=lambda: long_interval, on_moved=lambda: None)
    stop = asyncio.Event()
    runner = asyncio.create_task(loop.run(stop))
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        loop.hint(demand=True)  # a hint every 10 ms, as a stream of creates would send
        await asyncio.sleep(0.01)
    stop.set()
    await runner
    return cycles


async def test_fruitless_hinted_cycles_take_at_most_a_third_of_the_lane() -> None:
    # 1.3 s of hints: without spacing 5 cycles of 0.3 s would run back to back; spaced by twice
    # their length, one starts at 0 and one at 0.9 s.
    assert await _run_hinted(moves=False, seconds=1.3) <= 2


async def test_fruitless_long_cycles_space_the_hinted_ones_out_too() -> None:
    # 3 s of hints with a long cycle every 0.5 s: were the long cycles not counted, short and
    # long ones would keep the lane busy most of the time (about 9 cycles of 0.3 s). Spaced, 4;
    # 5 when a long and a hinted cycle wake at the same end of a spacing and run one after the other.
    assert await _run_hinted(moves=False, seconds=3.0, long_interval=0.5) <= 5


async def test_a_cycle_that_moved_something_is_followed_at_once() -> None:
    assert await _run_hinted(moves=True, seconds=1.3) >= 4


async def test_a_hint_that_is_not_only_demand_ends_the_spacing_at_once() -> None:
    """A full cluster: creates keep the lane spaced out; a session ends (room freed) and the next
    cycle starts at once instead of a whole fruitless cycle later."""
    starts: list[float] = []
    second = asyncio.Event()

    async def cycle() -> bool:
        starts.append(asyncio.get_running_loop().time())
        if len(starts) == 2:
            second.set()
        await asyncio.sleep(CYCLE)
        return False

    loop = CoordinatorLoop("test", cycle, long_interval=lambda: 3600, on_moved=lambda: None)
    stop = asyncio.Event()
    runner = asyncio.create_task(loop.run(stop))
    loop.hint(demand=True)
    await asyncio.sleep(CYCLE + 0.05)  # the first cycle ran and moved nothing: spaced out
    loop.hint(demand=True)
    await asyncio.sleep(0.05)
    assert len(starts) == 1, "demand alone waits out the spacing"
    room = asyncio.get_running_loop().time()
    loop.hint()
    await asyncio.wait_for(second.wait(), 5)
    stop.set()
    await runner
    assert starts[1] - room < CYCLE / 2


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


def test_a_demand_hint_names_its_lane_with_a_suffix() -> None:
    assert parse_demand(as_demand("schedule.place")) == ("schedule.place", True)
    assert parse_demand("schedule.place") == ("schedule.place", False)
    assert parse_demand("schedule") == ("schedule", False)


async def test_a_hint_runs_the_short_cycle_and_the_interval_the_long_one() -> None:
    ran: list[str] = []
    long_ran = asyncio.Event()

    def cycle(kind: str) -> Callable[[], Awaitable[bool]]:
        async def run() -> bool:
            ran.append(kind)
            if kind == "long":
                long_ran.set()
            return False

        return run

    loop = CoordinatorLoop("test", cycle("long"), long_interval=lambda: 0.2, short_cycle=cycle("short"))
    stop = asyncio.Event()
    runner = asyncio.create_task(loop.run(stop))
    loop.hint()
    await asyncio.wait_for(long_ran.wait(), 5)
    stop.set()
    await runner
    assert ran[0] == "short" and set(ran) == {"short", "long"}


async def test_the_retry_lane_coalesces_the_session_ends_of_its_debounce() -> None:
    """Every session end hints the retry lane: ends within RETRY_DEBOUNCE of its last cycle wait
    for one more cycle together (the loop's debounce, tested above, with the retry lane's value)."""
    engine = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none")  # never connected
    orchestrator = SokovanOrchestrator(engine, AgentRPCClient("x"), ClusterConfig())
    (retry,) = orchestrator.loops[Hint.RETRY]
    (place,) = orchestrator._named("schedule.place")
    assert retry._debounce() == RETRY_DEBOUNCE > place._debounce()
    await engine.dispose()


async def test_each_cycle_is_counted_by_kind_and_outcome() -> None:
    """`sokovan_lane_cycles_total`: hinted and long cycles, each as moved, fruitless or failed."""
    assert await _counted(held=True) == {
        ("short", "moved"): 1,
        ("short", "fruitless"): 1,
        ("short", "failed"): 1,
        ("long", "moved"): 0,
        ("long", "fruitless"): 0,
        ("long", "failed"): 0,
    }


async def test_a_lane_held_elsewhere_counts_no_fruitless_cycle() -> None:
    """In a worker (or manager) that does not hold the lane, a cycle that moved nothing ran nothing
    (the lane is not its own) and is not counted; one that moved or failed is."""
    got = await _counted(held=False)
    assert got[("short", "moved")] == 1 and got[("short", "failed")] == 1
    assert got[("short", "fruitless")] == 0


async def _counted(held: bool) -> dict[tuple[str, str], float]:
    """Three hinted cycles (moved, fruitless, failed) of a lane `held` here or not: the counts."""
    outcomes = iter([True, False, "boom"])

    async def cycle() -> bool:
        outcome = next(outcomes, False)
        if outcome == "boom":
            raise RuntimeError("boom")
        return bool(outcome)

    def count(kind: str, outcome: str) -> float:
        labels = {"lane": "counted", "kind": kind, "outcome": outcome}
        return REGISTRY.get_sample_value("sokovan_lane_cycles_total", labels) or 0.0

    before = {(k, o): count(k, o) for k in ("short", "long") for o in ("moved", "fruitless", "failed")}
    loop = CoordinatorLoop(
        "counted", cycle, long_interval=lambda: 3600, debounce=lambda: 0, on_moved=lambda: None
    )
    loop.held = lambda: held
    stop = asyncio.Event()
    runner = asyncio.create_task(loop.run(stop))
    for _ in range(3):
        loop.hint()
        for _ in range(100):  # until the cycle has run
            await asyncio.sleep(0.01)
            if not loop._hint.is_set():
                break
        await asyncio.sleep(0.05)
    stop.set()
    await runner
    return {key: count(*key) - value for key, value in before.items()}
