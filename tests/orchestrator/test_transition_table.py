"""Every (handler, outcome) pair of the unified handler pattern's table, applied by the coordinator
to real rows.

The handlers are the real classes with their real tables and targets; only `execute` is replaced
so that each outcome can be forced, and the outcome is judged by the coordinator as in production
(attempt limits, timeouts). The expected statuses are that table, written out here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.rpc import AgentRPCClient
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import ClusterConfig, PhaseLimit, PhaseSettings
from sokovan.db.models import Kernel, ScalingGroup, Session, SessionSchedulingHistory
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from sokovan.orchestrator.schedule.handler import SessionHandler, SessionResultT
from sokovan.orchestrator.schedule.handlers.lifecycle.call_agents import (
    PREPARE_SESSIONS,
    START_SESSIONS,
    CallAgents,
)
from sokovan.orchestrator.schedule.handlers.lifecycle.enforce_lifetime import EnforceLifetime
from sokovan.orchestrator.schedule.handlers.lifecycle.requeue_preempted import RequeuePreempted
from sokovan.orchestrator.schedule.handlers.lifecycle.schedule_new_sessions import ScheduleNewSessions
from sokovan.orchestrator.schedule.handlers.lifecycle.terminate_sessions import TerminateSessions
from sokovan.state.session_reads import SessionWithKernels
from tests.orchestrator.db_seed import Seed

S, K = SessionStatus, KernelStatus
RPC = AgentRPCClient("unused")

# handler, (session, kernel) it starts from, outcome → (session, kernel) it must end in
TABLE: list[
    tuple[SessionHandler, tuple[SessionStatus, KernelStatus], dict[str, tuple[SessionStatus, KernelStatus]]]
] = [
    (
        ScheduleNewSessions(None),  # type: ignore[arg-type]
        (S.PENDING, K.PENDING),
        {
            "SUCCESS": (S.SCHEDULED, K.SCHEDULED),
            "NEED_RETRY": (S.PENDING, K.PENDING),
            "EXPIRED": (S.CANCELLED, K.CANCELLED),
            "GIVE_UP": (S.CANCELLED, K.CANCELLED),
        },
    ),
    (
        CallAgents(PREPARE_SESSIONS, RPC),
        (S.SCHEDULED, K.SCHEDULED),
        {
            "SUCCESS": (S.PREPARING, K.PREPARING),
            "NEED_RETRY": (S.SCHEDULED, K.SCHEDULED),
            "EXPIRED": (S.PENDING, K.PENDING),
            "GIVE_UP": (S.PENDING, K.PENDING),
        },
    ),
    (
        CallAgents(START_SESSIONS, RPC),
        (S.PREPARED, K.PREPARED),
        {
            "SUCCESS": (S.CREATING, K.CREATING),
            "NEED_RETRY": (S.PREPARED, K.PREPARED),
            "EXPIRED": (S.PENDING, K.PENDING),
            "GIVE_UP": (S.PENDING, K.PENDING),
        },
    ),
    (
        TerminateSessions(RPC),
        (S.TERMINATING, K.RUNNING),
        {
            "SUCCESS": (S.TERMINATING, K.TERMINATING),
            "NEED_RETRY": (S.TERMINATING, K.RUNNING),
            "EXPIRED": (S.TERMINATED, K.TERMINATED),
            "GIVE_UP": (S.TERMINATED, K.TERMINATED),
        },
    ),
    (
        # No phase: it has no timeout or tries to give up on; its kernels are TerminateSessions'.
        EnforceLifetime(None),  # type: ignore[arg-type]
        (S.RUNNING, K.RUNNING),
        {"SUCCESS": (S.TERMINATING, K.RUNNING), "NEED_RETRY": (S.RUNNING, K.RUNNING)},
    ),
    (
        # No phase either; success is the one way back from TERMINATING: new PENDING kernels.
        RequeuePreempted(),
        (S.TERMINATING, K.TERMINATED),
        {"SUCCESS": (S.PENDING, K.PENDING), "NEED_RETRY": (S.TERMINATING, K.TERMINATED)},
    ),
]
CASES = [(h, start, outcome, want) for h, start, table in TABLE for outcome, want in table.items()]


def forced(handler: SessionHandler, outcome: str) -> SessionHandler:
    """The real handler (its name, targets, kernel condition, phase and table), whose work always
    ends in `outcome`."""

    class Forced(SessionHandler):
        name = handler.name
        targets = handler.targets
        kernels = handler.kernels
        phase = handler.phase
        expires_in = handler.expires_in
        transitions = handler.transitions

        async def execute(self, targets: Sequence[SessionWithKernels]) -> SessionResultT:
            ids = [t.id for t in targets]
            if outcome == "SUCCESS":
                return SessionResultT(successes=ids)
            if outcome in ("NEED_RETRY", "GIVE_UP"):
                return SessionResultT(failures=dict.fromkeys(ids, "forced failure"))
            return SessionResultT(skipped=dict.fromkeys(ids, "waiting"))  # EXPIRED: time does it

    return Forced()


@pytest.mark.parametrize(
    ("handler", "start", "outcome", "want"), CASES, ids=[f"{h.name}-{o}" for h, _, o, _ in CASES]
)
async def test_each_outcome_lands_where_the_table_says(
    engine: AsyncEngine,
    handler: SessionHandler,
    start: tuple[SessionStatus, KernelStatus],
    outcome: str,
    want: tuple[SessionStatus, KernelStatus],
) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    agent = None if start[1] == K.PENDING else "a1"
    sid = await seed.session(status=start[0], kernel_status=start[1], agent_id=agent)
    extra: dict[str, object] = {}
    if start[0] == S.TERMINATING:
        extra["status_info"] = {"cause": "USER_CANCELLED"}
    if outcome == "GIVE_UP":
        extra["phase_attempts"] = 2  # the third failure reaches max_tries=3
    if outcome == "EXPIRED":
        extra["status_changed_at"] = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    async with engine.begin() as conn:
        if extra:
            await conn.execute(update(Session).where(Session.id == sid).values(**extra))
        await conn.execute(update(ScalingGroup).values(pending_timeout=60))
    limit = PhaseLimit(timeout=60, max_tries=3)
    config = ClusterConfig()
    config.phases = PhaseSettings(schedule=limit, prepare=limit, start=limit, terminate=limit)
    await ScheduleCoordinator(engine, config, [forced(handler, outcome)]).cycle()
    async with engine.connect() as conn:
        session = (
            await conn.execute(select(Session.status, Session.status_info).where(Session.id == sid))
        ).one()
        kernel = (
            await conn.execute(select(Kernel.status, Kernel.agent_id).where(Kernel.session_id == sid))
        ).one()
        results = list(
            (
                await conn.execute(
                    select(SessionSchedulingHistory.result).where(SessionSchedulingHistory.session_id == sid)
                )
            ).scalars()
        )
    assert (session.status, kernel.status) == (want[0].value, want[1].value)
    if outcome != "SUCCESS" or want[0] != start[0]:
        assert results == [outcome], results  # the judgement is in the history
    if want[0] == S.PENDING and handler.name == "RequeuePreempted":
        # A requeued victim: new unplaced kernels, no cause, nothing to avoid (it did not fail).
        assert kernel.agent_id is None
        assert "cause" not in session.status_info
    elif want[0] == S.PENDING and start[0] != S.PENDING:
        # Back in the queue: kernels hold nothing, and the agent it failed on is avoided next time.
        assert kernel.agent_id is None
        assert session.status_info["avoid_agents"] == ["a1"]
        assert "cause" not in session.status_info


def test_the_table_covers_every_lifecycle_handler() -> None:
    from sokovan.orchestrator.orchestrator import session_handlers
    from sokovan.orchestrator.schedule.handlers.promotion.promote_sessions import PromoteSessions

    lifecycle = {h.name for h in session_handlers(None, RPC) if not isinstance(h, PromoteSessions)}  # type: ignore[arg-type]
    assert lifecycle == {h.name for h, _, _ in TABLE}
