"""Batched prepare calls split by size, against real PostgreSQL and a real agent RPC server.

One session whose kernels are too large for one request body fails alone; the other sessions of
the batch are prepared. The agent here is the real RPC server (signatures, body limit, 413) over
handlers that record what reached them.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.agent.rpc_server import RPCServer, single_agent
from sokovan.common.rpc import (
    BATCH_BODY_LIMIT,
    MAX_BODY,
    AcceptedResponse,
    AgentRPCClient,
    CheckAndPullRequest,
    CreateKernelsRequest,
    DestroyKernelsRequest,
    LogsRequest,
    LogsResponse,
    ReconcileRequest,
)
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Agent, Kernel, Session, SessionSchedulingHistory
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from sokovan.orchestrator.schedule.handlers.lifecycle.call_agents import PREPARE_SESSIONS, CallAgents
from tests.orchestrator.db_seed import Seed, read_column

SECRET = "batch-secret"
MIB = 2**20


class Recorder:
    """An agent that accepts every kernel and remembers each call's sessions."""

    agent_id = "a1"

    def __init__(self) -> None:
        self.calls: list[set[str]] = []

    async def check_and_pull(self, request: CheckAndPullRequest) -> AcceptedResponse:
        self.calls.append({k.session_id for k in request.kernels})
        return AcceptedResponse(accepted=[k.kernel_id for k in request.kernels])

    async def create_kernels(self, request: CreateKernelsRequest) -> AcceptedResponse:
        return AcceptedResponse()

    async def destroy_kernels(self, request: DestroyKernelsRequest) -> AcceptedResponse:
        return AcceptedResponse()

    async def reconcile(self, request: ReconcileRequest) -> AcceptedResponse:
        return AcceptedResponse()

    async def logs(self, request: LogsRequest) -> LogsResponse | None:
        return None

    def sessions(self) -> set[str]:
        return set().union(*self.calls)


Agent1 = tuple[Recorder, Seed, AgentRPCClient]
StartAgent = Callable[[int], Awaitable[Agent1]]


@pytest.fixture
async def start_agent(engine: AsyncEngine) -> AsyncIterator[StartAgent]:
    """Starts the recording agent reading bodies up to `max_body`, seeds it as READY agent `a1`."""
    servers: list[RPCServer] = []
    client = AgentRPCClient(SECRET, timeout=30)

    async def start(max_body: int) -> Agent1:
        recorder = Recorder()
        server = RPCServer(single_agent(recorder), SECRET, "127.0.0.1", 0, max_body=max_body)
        await server.start()
        servers.append(server)
        seed = await Seed(engine).tenancy()
        await seed.agent("a1", cpu=64)
        async with engine.begin() as conn:
            await conn.execute(update(Agent).where(Agent.id == "a1").values(rpc_addr=server.rpc_addr))
        return recorder, seed, client

    yield start
    for server in servers:
        await server.stop()
    await client.close()


async def scheduled(seed: Seed, kernels: int = 1, environ_bytes: int = 0) -> uuid.UUID:
    """A SCHEDULED session on `a1` whose kernels each carry an environ of `environ_bytes`."""
    environ = {"BLOB": "x" * environ_bytes} if environ_bytes else {}
    return await seed.session(size=kernels, status=SessionStatus.SCHEDULED, agent_id="a1", environ=environ)


async def prepare(engine: AsyncEngine, client: AgentRPCClient) -> None:
    await ScheduleCoordinator(engine, ClusterConfig(), [CallAgents(PREPARE_SESSIONS, client)]).cycle()


async def statuses(engine: AsyncEngine, sids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(Session.id, Session.status).where(Session.id.in_(sids)))
        return {r.id: r.status for r in rows}


async def messages(engine: AsyncEngine, sid: uuid.UUID) -> list[Any]:
    return await read_column(
        engine, select(SessionSchedulingHistory.message).where(SessionSchedulingHistory.session_id == sid)
    )


async def test_a_session_too_large_for_one_call_fails_alone(
    engine: AsyncEngine, start_agent: StartAgent
) -> None:
    recorder, seed, client = await start_agent(MAX_BODY)
    small = [await scheduled(seed, kernels=2, environ_bytes=1000) for _ in range(3)]
    # 20 kernels with 1 MiB of environ each: 20 MiB, over even what the agent reads (a 413 for all).
    huge = await scheduled(seed, kernels=20, environ_bytes=MIB)

    await prepare(engine, client)

    now = await statuses(engine, [*small, huge])
    assert [now[s] for s in small] == ["PREPARING"] * 3
    assert now[huge] == "SCHEDULED"  # a failure of the stage: retried, then rescheduled
    assert recorder.sessions() == {str(s) for s in small}
    assert any("over the limit" in (m or "") for m in await messages(engine, huge))
    kernels = await read_column(engine, select(Kernel.status).where(Kernel.session_id == huge))
    assert kernels == [KernelStatus.SCHEDULED.value] * 20


async def test_a_batch_larger_than_one_call_goes_in_several(
    engine: AsyncEngine, start_agent: StartAgent
) -> None:
    recorder, seed, client = await start_agent(MAX_BODY)
    # Four sessions of 3 MiB each: 12 MiB for the agent, more than one call takes.
    sids = [await scheduled(seed, kernels=1, environ_bytes=3 * MIB) for _ in range(4)]
    assert 4 * 3 * MIB > BATCH_BODY_LIMIT

    await prepare(engine, client)

    assert set((await statuses(engine, sids)).values()) == {"PREPARING"}
    assert len(recorder.calls) == 2
    assert recorder.sessions() == {str(s) for s in sids}


async def test_an_agent_answering_413_gets_halves_until_only_the_culprit_fails(
    engine: AsyncEngine, start_agent: StartAgent
) -> None:
    """The agent reads less than the manager thinks: its 413 splits the call, not fails it."""
    recorder, seed, client = await start_agent(256 * 1024)
    small = [await scheduled(seed, kernels=1, environ_bytes=1000) for _ in range(7)]
    culprit = await scheduled(seed, kernels=1, environ_bytes=300 * 1024)

    await prepare(engine, client)

    now = await statuses(engine, [*small, culprit])
    assert [now[s] for s in small] == ["PREPARING"] * 7
    assert now[culprit] == "SCHEDULED"
    assert recorder.sessions() == {str(s) for s in small}
    assert any("HTTP 413" in (m or "") for m in await messages(engine, culprit))
