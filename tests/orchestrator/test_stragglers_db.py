"""Start-up calls in parallel across agents, never one agent's slowness holding another's sessions:
against real PostgreSQL and two real agent RPC servers, one of which answers only after a while."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.agent.rpc_server import RPCServer, single_agent
from sokovan.common.rpc import AgentRPCClient, CheckAndPullRequest
from sokovan.common.types import SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Agent, Session
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from sokovan.orchestrator.schedule.handlers.lifecycle import call_agents
from sokovan.orchestrator.schedule.handlers.lifecycle.call_agents import PREPARE_SESSIONS, CallAgents
from tests.orchestrator.db_seed import Seed
from tests.orchestrator.test_rpc_batches_db import SECRET, Recorder

SLOW = 2.0


class SlowRecorder(Recorder):
    agent_id = "slow"

    def __init__(self) -> None:
        super().__init__()
        self.answered = asyncio.Event()

    async def check_and_pull(self, request: CheckAndPullRequest) -> object:  # type: ignore[override]
        await asyncio.sleep(SLOW)
        try:
            return await super().check_and_pull(request)
        finally:
            self.answered.set()


@pytest.fixture
async def two_agents(engine: AsyncEngine) -> AsyncIterator[tuple[Seed, SlowRecorder]]:
    slow = SlowRecorder()
    fast = Recorder()
    servers = [RPCServer(single_agent(handlers), SECRET, "127.0.0.1", 0) for handlers in (fast, slow)]
    for server in servers:
        await server.start()
    seed = await Seed(engine).tenancy()
    for agent_id, server in zip(("a1", "slow"), servers, strict=True):
        await seed.agent(agent_id, cpu=64)
        async with engine.begin() as conn:
            await conn.execute(update(Agent).where(Agent.id == agent_id).values(rpc_addr=server.rpc_addr))
    yield seed, slow
    for server in servers:
        await server.stop()


async def _status(engine: AsyncEngine, sid: uuid.UUID) -> str:
    async with engine.connect() as conn:
        return str((await conn.execute(select(Session.status).where(Session.id == sid))).scalar_one())


async def test_a_slow_agent_holds_back_only_its_own_sessions(
    engine: AsyncEngine, two_agents: tuple[Seed, SlowRecorder]
) -> None:
    seed, slow = two_agents
    fast_sid = await seed.session(status=SessionStatus.SCHEDULED, agent_id="a1")
    slow_sid = await seed.session(status=SessionStatus.SCHEDULED, agent_id="slow")
    client = AgentRPCClient(SECRET, timeout=30)
    woken = asyncio.Event()
    handler = CallAgents(PREPARE_SESSIONS, client, wake=woken.set)
    coordinator = ScheduleCoordinator(engine, ClusterConfig(), [handler])
    try:
        started = time.monotonic()
        await coordinator.cycle()
        assert time.monotonic() - started < SLOW  # the cycle did not wait for the slow agent
        assert await _status(engine, fast_sid) == "PREPARING"
        assert await _status(engine, slow_sid) == "SCHEDULED"
        # While its call runs, the slow agent's session is not sent again.
        await coordinator.cycle()
        assert slow_sid in handler.in_flight.running
        await asyncio.wait_for(woken.wait(), SLOW * 5)  # its answer landed: the lane is woken
        await coordinator.cycle()
        assert await _status(engine, slow_sid) == "PREPARING"
        assert len(slow.calls) == 1
    finally:
        await client.close()


async def test_a_late_call_that_fails_is_reported_as_a_failure(
    engine: AsyncEngine, two_agents: tuple[Seed, SlowRecorder]
) -> None:
    seed, _ = two_agents
    sid = await seed.session(status=SessionStatus.SCHEDULED, agent_id="slow")
    client = AgentRPCClient(SECRET, timeout=0.3 + call_agents.STRAGGLER_WAIT)  # times out after the wait
    woken = asyncio.Event()
    handler = CallAgents(PREPARE_SESSIONS, client, wake=woken.set)
    coordinator = ScheduleCoordinator(engine, ClusterConfig(), [handler])
    try:
        await coordinator.cycle()
        assert await _status(engine, sid) == "SCHEDULED"
        await asyncio.wait_for(woken.wait(), SLOW * 5)
        assert not handler.in_flight.running and handler.in_flight.ended[sid][1]  # the failure's reason
        await coordinator.cycle()
        assert await _status(engine, sid) == "SCHEDULED"  # a failed try: retried in a later cycle
        assert sid not in handler.in_flight.ended
    finally:
        await client.close()


async def test_sessions_whose_calls_run_do_not_fill_the_next_batch(
    engine: AsyncEngine, two_agents: tuple[Seed, SlowRecorder]
) -> None:
    """A cycle reads at most `batch` sessions, the oldest first; those whose calls still run are
    left out of the read, so the next cycle reaches the sessions behind them."""
    seed, _ = two_agents
    slow_sid = await seed.session(status=SessionStatus.SCHEDULED, agent_id="slow")  # the oldest
    fast_sid = await seed.session(status=SessionStatus.SCHEDULED, agent_id="a1")
    client = AgentRPCClient(SECRET, timeout=30)
    handler = CallAgents(PREPARE_SESSIONS, client)
    handler.batch = 1
    coordinator = ScheduleCoordinator(engine, ClusterConfig(), [handler])
    try:
        await coordinator.cycle()  # the slow agent's session: its call outlasts the cycle
        assert slow_sid in handler.in_flight.running
        assert await _status(engine, fast_sid) == "SCHEDULED"
        await coordinator.cycle()  # reads past it
        assert await _status(engine, fast_sid) == "PREPARING"
        assert await _status(engine, slow_sid) == "SCHEDULED"
    finally:
        await client.close()
