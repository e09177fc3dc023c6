"""A lane's cycle carries the sessions its agents' answers prepared on into the start call at once
(`ScheduleCoordinator.carry_on`): against real PostgreSQL and a real agent RPC server. Only where
this process holds the start lane and no cycle of it runs, and only for a cycle's worth of
sessions; otherwise the start lane is woken, as before."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.agent import answers
from sokovan.agent.hollow_agent import HollowAgent
from sokovan.agent.rpc_server import RPCServer
from sokovan.common.rpc import AcceptedResponse, AgentRPCClient, CreateKernelsRequest
from sokovan.common.types import SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import SessionSchedulingHistory
from sokovan.orchestrator.orchestrator import SokovanOrchestrator
from sokovan.orchestrator.schedule import coordinator as schedule_coordinator
from sokovan.orchestrator.schedule.handlers.lifecycle.call_agents import CallAgents
from sokovan.orchestrator.schedule.handoffs import PREPARE, START
from tests.orchestrator.db_seed import Seed
from tests.orchestrator.test_rpc_answers_db import at_once, serve, status_of

S = SessionStatus


Carried = tuple[Seed, SokovanOrchestrator, list[str]]


@pytest.fixture
async def carried(
    engine: AsyncEngine, served: tuple[Seed, AgentRPCClient, list[RPCServer]]
) -> AsyncIterator[Carried]:
    """One manager process with an agent that prepares and starts at once; it holds both agent-call
    lanes. Yields the seed, the orchestrator and the lanes its coordinator wakes."""
    seed, client, servers = served
    await serve(engine, seed, servers, HollowAgent("a1", "b", at_once(), answers.note))
    orchestrator = SokovanOrchestrator(engine, client, ClusterConfig())
    for name in (PREPARE, START):
        assert await orchestrator.lock.acquire(name)
    woken: list[str] = []
    orchestrator.schedule.on_wake = woken.append
    yield seed, orchestrator, woken
    await orchestrator.lock.release_all()


async def _history(engine: AsyncEngine, sid: uuid.UUID) -> list[tuple[str, str | None]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(SessionSchedulingHistory.handler, SessionSchedulingHistory.to_status)
            .where(SessionSchedulingHistory.session_id == sid)
            .order_by(SessionSchedulingHistory.id)
        )
        return [(r[0], r[1]) for r in rows]


async def test_a_prepare_cycle_carries_its_prepared_sessions_on_to_running(
    engine: AsyncEngine, carried: Carried
) -> None:
    seed, orchestrator, woken = carried
    sid = await seed.session(status=S.SCHEDULED, agent_id="a1")
    other = await seed.session(status=S.PREPARED, agent_id="a1")  # the start lane's, not this carry's

    await orchestrator.schedule.cycle_lane("prepare", short=True)

    assert await status_of(engine, sid) == "RUNNING"  # one cycle of the prepare lane
    assert await _history(engine, sid) == [
        ("PrepareSessions", "PREPARING"),
        ("PromoteToPrepared", "PREPARED"),
        ("StartSessions", "CREATING"),
        ("PromoteToRunning", "RUNNING"),
    ]
    # Only the sessions the cycle prepared were started; the start lane was not woken for them.
    assert await status_of(engine, other) == "PREPARED"
    assert START not in woken


async def test_the_start_lane_is_woken_when_a_cycle_of_it_runs(engine: AsyncEngine, carried: Carried) -> None:
    seed, orchestrator, woken = carried
    sid = await seed.session(status=S.SCHEDULED, agent_id="a1")
    (start_loop,) = [loop for loop in orchestrator.loops["schedule"] if loop.name == START]
    release = asyncio.Event()

    async def busy() -> bool:
        await release.wait()
        return False

    holder = asyncio.ensure_future(start_loop.run_now(busy))  # a cycle of the start lane runs
    await asyncio.sleep(0)
    await orchestrator.schedule.cycle_lane("prepare", short=True)
    release.set()
    assert await holder is False

    assert await status_of(engine, sid) == "PREPARED"  # left to the start lane's own cycle
    assert START in woken
    await orchestrator.schedule.cycle_lane("start", short=True)
    assert await status_of(engine, sid) == "RUNNING"


async def test_a_burst_is_left_to_the_start_lane(
    engine: AsyncEngine, carried: Carried, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schedule_coordinator, "CARRY_AT_MOST", 1)
    seed, orchestrator, woken = carried
    sids = [await seed.session(status=S.SCHEDULED, agent_id="a1") for _ in range(2)]

    await orchestrator.schedule.cycle_lane("prepare", short=True)

    assert [await status_of(engine, sid) for sid in sids] == ["PREPARED", "PREPARED"]
    assert START in woken


async def test_a_lane_another_process_holds_is_woken_not_run(engine: AsyncEngine, carried: Carried) -> None:
    seed, orchestrator, woken = carried
    sid = await seed.session(status=S.SCHEDULED, agent_id="a1")
    await orchestrator.lock.release_all()  # no lane held here now
    assert await orchestrator.lock.acquire(PREPARE)

    await orchestrator.schedule.cycle_lane("prepare", short=True)

    assert await status_of(engine, sid) == "PREPARED"
    assert START in woken


class SlowStart(HollowAgent):
    """Starts its kernels a third of a second late (a container that is slow to start)."""

    async def create_kernels(self, request: CreateKernelsRequest) -> AcceptedResponse:
        await asyncio.sleep(0.3)
        return await super().create_kernels(request)


async def test_a_slow_start_goes_on_in_the_background_and_the_start_lane_reports_it(
    engine: AsyncEngine,
    served: tuple[Seed, AgentRPCClient, list[RPCServer]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schedule_coordinator, "CARRY_WAIT", 0.05)
    seed, client, servers = served
    await serve(engine, seed, servers, SlowStart("a1", "b", at_once(), answers.note))
    orchestrator = SokovanOrchestrator(engine, client, ClusterConfig())
    try:
        for name in (PREPARE, START):
            assert await orchestrator.lock.acquire(name)
        woken: list[str] = []
        orchestrator.schedule.on_wake = woken.append
        (start_call,) = [h for h in orchestrator.schedule.lanes["start"] if isinstance(h, CallAgents)]
        ended = asyncio.Event()
        start_call.in_flight.wake = ended.set  # what wakes the start lane when the call ends
        sid = await seed.session(status=S.SCHEDULED, agent_id="a1")

        began = time.monotonic()
        await orchestrator.schedule.cycle_lane("prepare", short=True)
        assert time.monotonic() - began < 0.3  # the prepare lane did not wait for the start
        assert await status_of(engine, sid) == "PREPARED"
        assert START in woken

        await asyncio.wait_for(ended.wait(), 5)
        await orchestrator.schedule.cycle_lane("start", short=True)
        # The call's success and the running event its answer carried: one write, as ever.
        assert await status_of(engine, sid) == "RUNNING"
        assert await _history(engine, sid) == [
            ("PrepareSessions", "PREPARING"),
            ("PromoteToPrepared", "PREPARED"),
            ("StartSessions", "CREATING"),
            ("PromoteToRunning", "RUNNING"),
        ]
    finally:
        await orchestrator.lock.release_all()
