"""A session moves on the kernel events its agents' answers carry (`agent.answers`), applied right
after the lane's write: against real PostgreSQL and real agent RPC servers, with no event bus at
all. Answers about kernels not sent, from another agent, or malformed are ignored."""

from __future__ import annotations

import random
import uuid
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.agent import answers
from sokovan.agent.hollow_agent import HollowAgent, HollowBehaviour
from sokovan.agent.images import ImageCatalog
from sokovan.agent.rpc_server import AgentRPCHandlers, RPCServer, single_agent
from sokovan.common.events import KernelPrepared
from sokovan.common.rpc import AcceptedResponse, AgentRPCClient, CheckAndPullRequest
from sokovan.common.types import SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Agent, Kernel, KernelSchedulingHistory, Session, SessionSchedulingHistory
from sokovan.orchestrator.orchestrator import session_lanes
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from tests.orchestrator.db_seed import Seed
from tests.orchestrator.test_preemption_db import Collect
from tests.orchestrator.test_rpc_batches_db import SECRET, Recorder
from tests.support import statements_sent

S = SessionStatus


class Forger(Recorder):
    """Answers a prepare with events it has no business sending (and one that is no event)."""

    victim = ""

    async def check_and_pull(self, request: CheckAndPullRequest) -> AcceptedResponse:
        mine = request.kernels[0]
        answers.note(KernelPrepared(agent_id="a2", kernel_id=mine.kernel_id, session_id=mine.session_id))
        answers.note(KernelPrepared(agent_id="a1", kernel_id=self.victim, session_id=mine.session_id))
        return AcceptedResponse(accepted=[mine.kernel_id], events=[{"name": "kernel.prepared"}])


async def serve(
    engine: AsyncEngine, seed: Seed, servers: list[RPCServer], handlers: AgentRPCHandlers
) -> None:
    server = RPCServer(single_agent(handlers), SECRET, "127.0.0.1", 0)
    await server.start()
    servers.append(server)
    await seed.agent(handlers.agent_id, cpu=64)
    async with engine.begin() as conn:
        await conn.execute(
            update(Agent).where(Agent.id == handlers.agent_id).values(rpc_addr=server.rpc_addr)
        )


def at_once() -> HollowBehaviour:
    """A hollow agent's behaviour whose images are there: it prepares, and starts, at once."""
    return HollowBehaviour(
        scaling_group="default",
        available_slots={"cpu": "64"},
        catalog=ImageCatalog(),
        pull_delay=0.0,
        pull_failure_rate=0.0,
        rng=random.Random(1),
    )


async def steps(conn: AsyncConnection, first: Any, where: Any) -> list[tuple[Any, ...]]:
    """(`first`, to_status) of a history table's rows matching `where`, in order."""
    table = first.class_
    rows = await conn.execute(select(first, table.to_status).where(where).order_by(table.id))
    return [tuple(r) for r in rows]


async def status_of(engine: AsyncEngine, sid: uuid.UUID) -> str:
    async with engine.connect() as conn:
        return str((await conn.execute(select(Session.status).where(Session.id == sid))).scalar_one())


async def test_a_session_moves_on_its_agents_answers_alone(
    engine: AsyncEngine, served: tuple[Seed, AgentRPCClient, list[RPCServer]]
) -> None:
    seed, client, servers = served
    # An agent whose events reach nobody but its answers: no outbox, no bus, no consumer.
    await serve(engine, seed, servers, HollowAgent("a1", "b", at_once(), answers.note))
    sid = await seed.session(status=S.SCHEDULED, agent_id="a1")  # a hollow `true` runs till destroyed
    published = Collect()
    coordinator = ScheduleCoordinator(
        engine, ClusterConfig(), session_lanes(engine, client), events=published
    )
    with statements_sent(engine) as statements:
        await coordinator.cycle_lane("prepare", short=True)
    assert await status_of(engine, sid) == "PREPARED"  # one cycle: prepared on the answer
    # The session read and one write: the promotion the answers met went with the call's move.
    assert len(statements) == 2, statements
    with statements_sent(engine) as statements:
        await coordinator.cycle_lane("start", short=True)
    assert await status_of(engine, sid) == "RUNNING"
    assert len(statements) == 2, statements
    async with engine.connect() as conn:
        kernel_id, kernel = (
            await conn.execute(select(Kernel.id, Kernel.status).where(Kernel.session_id == sid))
        ).one()
        history = await steps(
            conn, SessionSchedulingHistory.handler, SessionSchedulingHistory.session_id == sid
        )
        kernel_history = await steps(
            conn, KernelSchedulingHistory.source, KernelSchedulingHistory.kernel_id == kernel_id
        )
    assert history == [
        ("PrepareSessions", "PREPARING"),
        ("PromoteToPrepared", "PREPARED"),
        ("StartSessions", "CREATING"),
        ("PromoteToRunning", "RUNNING"),
    ]
    assert kernel == "RUNNING"
    seen = [(e.name, e.from_status, e.to_status) for e in published.events]
    assert seen == [
        ("session.status", "SCHEDULED", "PREPARING"),
        ("session.status", "PREPARING", "PREPARED"),
        ("kernel.status", "SCHEDULED", "PREPARED"),
        ("session.status", "PREPARED", "CREATING"),
        ("session.status", "CREATING", "RUNNING"),
        ("kernel.status", "PREPARED", "RUNNING"),
    ]
    assert {e.kernel_id for e in published.events if e.kernel_id} == {str(kernel_id)}
    assert kernel_history == [("agent:answer", "PREPARED"), ("agent:answer", "RUNNING")]


async def test_answers_about_other_kernels_or_from_another_agent_are_ignored(
    engine: AsyncEngine, served: tuple[Seed, AgentRPCClient, list[RPCServer]]
) -> None:
    seed, client, servers = served
    forger = Forger()
    await serve(engine, seed, servers, forger)
    await seed.agent("a2", cpu=64)  # unreachable (127.0.0.1:1): its session stays SCHEDULED
    sid = await seed.session(status=S.SCHEDULED, agent_id="a1")
    victim_sid = await seed.session(status=S.SCHEDULED, agent_id="a2")
    async with engine.connect() as conn:
        forger.victim = str(
            (await conn.execute(select(Kernel.id).where(Kernel.session_id == victim_sid))).scalar_one()
        )
    coordinator = ScheduleCoordinator(engine, ClusterConfig(), session_lanes(engine, client))
    await coordinator.cycle_lane("prepare", short=True)
    assert await status_of(engine, sid) == "PREPARING"  # its own kernel's event named another agent
    assert await status_of(engine, victim_sid) == "SCHEDULED"
    async with engine.connect() as conn:
        kernels = dict((await conn.execute(select(Kernel.session_id, Kernel.status))).all())
    assert kernels == {sid: "PREPARING", victim_sid: "SCHEDULED"}
