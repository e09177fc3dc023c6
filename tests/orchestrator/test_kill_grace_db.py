"""A preemption victim's kill grace in the TERMINATE phase, against real PostgreSQL and a real
agent RPC server (signatures, request validation) over handlers that record the destroys.

TerminateSessions sends each session's `status_info.kill_grace` as the destroy's grace, one call
per agent and grace; a session without it is destroyed as before (no grace: the agent's own). The
straggler SIGKILL and the TERMINATE timeout wait until the grace has passed.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.agent.rpc_server import RPCServer, single_agent
from sokovan.common.preemption import KILL_GRACE
from sokovan.common.rpc import (
    AcceptedResponse,
    AgentRPCClient,
    CheckAndPullRequest,
    CreateKernelsRequest,
    DestroyKernelsRequest,
    LogsRequest,
    LogsResponse,
    ReconcileRequest,
)
from sokovan.common.types import FailureCause, KernelStatus, SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Agent, Kernel, Session
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from sokovan.orchestrator.schedule.handlers.lifecycle.terminate_sessions import TerminateSessions
from tests.orchestrator.db_seed import Seed, read_column

SECRET = "grace-secret"
FORCE_AFTER = 60.0  # the straggler force of these tests (the default terminate timeout is 120 s)


@dataclass(frozen=True)
class Destroy:
    kernel_ids: frozenset[str]
    forced: bool
    grace: float | None


class Recorder:
    """An agent that accepts every destroy and remembers each call."""

    agent_id = "a1"

    def __init__(self) -> None:
        self.destroys: list[Destroy] = []

    async def check_and_pull(self, request: CheckAndPullRequest) -> AcceptedResponse:
        return AcceptedResponse()

    async def create_kernels(self, request: CreateKernelsRequest) -> AcceptedResponse:
        return AcceptedResponse()

    async def destroy_kernels(self, request: DestroyKernelsRequest) -> AcceptedResponse:
        self.destroys.append(Destroy(frozenset(request.kernel_ids), request.forced, request.grace))
        return AcceptedResponse(accepted=list(request.kernel_ids))

    async def reconcile(self, request: ReconcileRequest) -> AcceptedResponse:
        return AcceptedResponse()

    async def logs(self, request: LogsRequest) -> LogsResponse | None:
        return None


@dataclass
class Cluster:
    recorder: Recorder
    seed: Seed
    client: AgentRPCClient
    engine: AsyncEngine

    async def terminating(
        self,
        info: dict[str, Any],
        *,
        kernel_status: KernelStatus = KernelStatus.RUNNING,
        ago: float = 0.0,
    ) -> uuid.UUID:
        """A TERMINATING session on `a1` carrying `info`, in that status for `ago` seconds."""
        sid = await self.seed.session(
            status=SessionStatus.TERMINATING, kernel_status=kernel_status, agent_id="a1", status_info=info
        )
        if ago:
            since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=ago)
            async with self.engine.begin() as conn:
                await conn.execute(update(Session).where(Session.id == sid).values(status_changed_at=since))
        return sid

    async def kernels(self, sid: uuid.UUID) -> frozenset[str]:
        ids = await read_column(self.engine, select(Kernel.id).where(Kernel.session_id == sid))
        return frozenset(str(k) for k in ids)

    async def status(self, sid: uuid.UUID) -> str:
        statuses = await read_column(self.engine, select(Session.status).where(Session.id == sid))
        return str(statuses[0])

    async def cycle(self) -> None:
        handler = TerminateSessions(self.client, force_after=lambda: FORCE_AFTER)
        await ScheduleCoordinator(self.engine, ClusterConfig(), [handler]).cycle()


@pytest.fixture
async def cluster(engine: AsyncEngine) -> AsyncIterator[Cluster]:
    recorder = Recorder()
    server = RPCServer(single_agent(recorder), SECRET, "127.0.0.1", 0)
    await server.start()
    client = AgentRPCClient(SECRET)
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=64)
    async with engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "a1").values(rpc_addr=server.rpc_addr))
    try:
        yield Cluster(recorder, seed, client, engine)
    finally:
        await client.close()
        await server.stop()


async def test_each_session_is_destroyed_with_its_kill_grace(cluster: Cluster) -> None:
    plain = await cluster.terminating({"cause": FailureCause.USER_CANCELLED.value})
    victim = await cluster.terminating({"cause": "PREEMPTED", KILL_GRACE: 20})
    other = await cluster.terminating({"cause": "PREEMPTED", KILL_GRACE: 7.5})
    same = await cluster.terminating({"cause": "PREEMPTED", KILL_GRACE: 20})
    bogus = await cluster.terminating({"cause": "PREEMPTED", KILL_GRACE: "soon"})  # not a number: none

    await cluster.cycle()

    by_grace = {d.grace: d for d in cluster.recorder.destroys}
    assert len(cluster.recorder.destroys) == len(by_grace) == 3  # one call per grace
    assert by_grace[None].kernel_ids == await cluster.kernels(plain) | await cluster.kernels(bogus)
    assert by_grace[20].kernel_ids == await cluster.kernels(victim) | await cluster.kernels(same)
    assert by_grace[7.5].kernel_ids == await cluster.kernels(other)
    assert not any(d.forced for d in cluster.recorder.destroys)
    for sid in (plain, victim, other, same, bogus):
        assert await cluster.status(sid) == SessionStatus.TERMINATING
        kernels = await read_column(cluster.engine, select(Kernel.status).where(Kernel.session_id == sid))
        assert kernels == [KernelStatus.TERMINATING.value]


async def test_a_forced_victim_is_killed_at_once_and_forces_no_other(cluster: Cluster) -> None:
    forced = await cluster.terminating({"cause": "PREEMPTED", KILL_GRACE: 30, "forced": True})
    plain = await cluster.terminating({"cause": FailureCause.USER_CANCELLED.value})

    await cluster.cycle()

    by_grace = {d.grace: d for d in cluster.recorder.destroys}
    assert by_grace[30] == Destroy(await cluster.kernels(forced), True, 30)
    assert by_grace[None] == Destroy(await cluster.kernels(plain), False, None)


@pytest.mark.parametrize(
    ("grace", "ago", "forced_again"),
    [
        (None, FORCE_AFTER + 10, True),  # as before: past force_after
        (None, FORCE_AFTER - 10, False),
        (30, FORCE_AFTER + 10, True),  # a short grace: force_after rules
        (100, FORCE_AFTER + 10, False),  # still within its grace (+ slack)
        (100, 100 + 2, False),  # past the grace, within the slack
        (100, 100 + 10, True),
    ],
)
async def test_stragglers_are_not_killed_within_their_grace(
    cluster: Cluster, grace: float | None, ago: float, forced_again: bool
) -> None:
    info: dict[str, Any] = {"cause": "PREEMPTED"} | ({KILL_GRACE: grace} if grace is not None else {})
    sid = await cluster.terminating(info, kernel_status=KernelStatus.TERMINATING, ago=ago)

    await cluster.cycle()

    expected = [Destroy(await cluster.kernels(sid), True, None)] if forced_again else []
    assert cluster.recorder.destroys == expected
    assert await cluster.status(sid) == SessionStatus.TERMINATING


@pytest.mark.parametrize(
    ("grace", "ago", "ended"),
    [
        (None, 130, True),  # the default TERMINATE timeout is 120 s: as before
        (None, 110, False),
        (60, 130, True),  # 60 + 30 < 120: the phase's timeout rules
        (600, 130, False),  # within grace + 30 s
        (600, 625, False),
        (600, 640, True),
    ],
)
async def test_the_terminate_timeout_outlasts_the_grace(
    cluster: Cluster, grace: float | None, ago: float, ended: bool
) -> None:
    info: dict[str, Any] = {"cause": "PREEMPTED"} | ({KILL_GRACE: grace} if grace is not None else {})
    sid = await cluster.terminating(info, kernel_status=KernelStatus.TERMINATING, ago=ago)

    await cluster.cycle()

    # Ended: forced to its end (TERMINATED or ERROR is the cause's to decide, `endings`).
    assert SessionStatus(await cluster.status(sid)).is_terminal == ended
