"""The orchestrator's loops run as one group: one that raises ends all of them before the error
reaches the supervisor, so that a supervised restart runs exactly one set of loops (security review:
`gather` left the siblings running, and every restart added a set)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from sokovan.bus.hints import Hint
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.supervise import Backoff, supervise
from sokovan.config.cluster import ClusterConfig
from sokovan.orchestrator.orchestrator import SokovanOrchestrator

WAIT = 5.0


def _running_loops() -> list[asyncio.Task[object]]:
    """The tasks running a `CoordinatorLoop.run` (however they were started)."""
    return [
        task
        for task in asyncio.all_tasks()
        if not task.done() and getattr(task.get_coro(), "__qualname__", "") == "CoordinatorLoop.run"
    ]


@pytest.fixture
async def orchestrator() -> AsyncIterator[SokovanOrchestrator]:
    engine = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none")  # never connected
    yield SokovanOrchestrator(engine, AgentRPCClient("x"), ClusterConfig())
    await engine.dispose()


async def _settle(stop: asyncio.Event) -> None:
    """End whatever loops are left (the bug under test leaves some), so the test leaves none."""
    stop.set()
    left = _running_loops()
    if left:
        await asyncio.wait(left, timeout=WAIT)


async def test_a_loop_that_raises_ends_its_siblings(
    orchestrator: SokovanOrchestrator, monkeypatch: pytest.MonkeyPatch
) -> None:
    loops = sum(len(lane) for lane in orchestrator.loops.values())
    assert loops > 2

    async def broken(stop: asyncio.Event) -> None:
        await asyncio.sleep(0.2)  # the others are running by then
        raise RuntimeError("a loop broke")

    monkeypatch.setattr(orchestrator.loops[Hint.RETRY][0], "run", broken)
    stop = asyncio.Event()
    try:
        with pytest.raises(RuntimeError, match="a loop broke"):  # the error itself, not a group
            await asyncio.wait_for(orchestrator.run(stop), WAIT)
        assert _running_loops() == []
    finally:
        await _settle(stop)


async def test_a_supervised_restart_runs_one_set_of_loops(
    orchestrator: SokovanOrchestrator, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_loops = sum(len(lane) for lane in orchestrator.loops.values()) - 1
    starts = 0
    restarted = asyncio.Event()

    async def broken_once(stop: asyncio.Event) -> None:
        nonlocal starts
        starts += 1
        if starts == 1:
            await asyncio.sleep(0.2)
            raise RuntimeError("a loop broke")
        restarted.set()
        await stop.wait()

    monkeypatch.setattr(orchestrator.loops[Hint.RETRY][0], "run", broken_once)
    stop = asyncio.Event()
    supervisor = asyncio.create_task(
        supervise("orchestrator", orchestrator.run, stop, backoff=Backoff(first=0.01, cap=0.01))
    )
    try:
        await asyncio.wait_for(restarted.wait(), WAIT)
        await asyncio.sleep(0.2)
        assert len(_running_loops()) == real_loops
        stop.set()
        await asyncio.wait_for(supervisor, WAIT)
        assert _running_loops() == []
    finally:
        supervisor.cancel()
        await _settle(stop)
