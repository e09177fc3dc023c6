"""Preemption's writes, in the placement lane's transaction (CONTRACT section 9).

`evict` applies one preemption decision all or nothing, through the same guarded writes with
history as every transition: each victim RUNNING → TERMINATING with cause PREEMPTED, who
preempted it, what happens once its kernels ended (the group's mode) and its kernels' kill grace;
the preemptor stays PENDING, nominated to its agents until the grace period plus
`NOMINATION_SLACK` has passed, with the reason naming whom it waits for. A victim that is no
longer RUNNING (another manager or the user moved it) abandons the whole decision for this cycle.
`lapse` clears the nomination of preemptors whose nomination ran out.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable

from sqlalchemy import ColumnElement, and_, func
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.bus.user_events import UserEvent
from sokovan.common.preemption import (
    KILL_GRACE,
    NOMINATED_AGENTS,
    NOMINATED_UNTIL,
    NOMINATION_SLACK,
    PREEMPT_MODE,
    PREEMPTED_BY,
    PREEMPTS,
    PreemptionMode,
    PreemptionSettings,
)
from sokovan.common.types import FailureCause, SchedulingResult, SessionStatus
from sokovan.db.models import Session
from sokovan.orchestrator.provisioner.reasons import preempted_by, waiting_for_victims
from sokovan.orchestrator.provisioner.snapshot import Preemption
from sokovan.state.session_writes import AppliedTransitions, SessionTransition, apply_session_transitions
from sokovan.state.status_info import SessionStatusInfo

NOMINATION_KEYS = frozenset({NOMINATED_AGENTS, NOMINATED_UNTIL, PREEMPTS})
# What a victim carries while it is being stopped; a requeued victim sheds it.
VICTIM_KEYS = frozenset({"cause", "message", "forced", PREEMPTED_BY, PREEMPT_MODE, KILL_GRACE})


def requeue_victim() -> ColumnElement[bool]:
    """The session is a preemption victim of a `requeue` group (never NULL, so it can be negated:
    a user's terminate replaces the cause, and then the victim simply ends)."""
    return and_(
        func.coalesce(Session.status_info[PREEMPT_MODE].astext, "") == PreemptionMode.REQUEUE.value,
        func.coalesce(Session.status_info["cause"].astext, "") == FailureCause.PREEMPTED.value,
    )


NOMINATION_LAPSED = "nomination lapsed: its victims did not end in time; competing again"


class _Abandoned(Exception):
    """A victim moved on: the savepoint of the decision is rolled back."""


async def evict(
    conn: AsyncConnection,
    preemption: Preemption,
    settings: PreemptionSettings,
    now: dt.datetime,
    handler: str,
) -> AppliedTransitions | None:
    """Apply the decision in a savepoint of the caller's transaction; None when it was abandoned."""
    victim_info: SessionStatusInfo = {
        "cause": FailureCause.PREEMPTED.value,
        "message": preempted_by(preemption.session_id, preemption.priority),
        "preempted_by": str(preemption.session_id),
        "preempt_mode": settings.mode.value,
        "kill_grace": settings.grace_period,
    }
    reason = waiting_for_victims(preemption.victims, preemption.agents)
    until = now + dt.timedelta(seconds=settings.grace_period + NOMINATION_SLACK)
    changes = [
        SessionTransition(
            session_id=victim,
            expected=frozenset({SessionStatus.RUNNING}),
            to_status=SessionStatus.TERMINATING,
            handler=handler,
            result=SchedulingResult.SUCCESS,
            status_info=victim_info,
            message=victim_info["message"],
        )
        for victim in preemption.victims
    ]
    changes.append(
        SessionTransition(
            session_id=preemption.session_id,
            expected=frozenset({SessionStatus.PENDING}),
            to_status=None,
            handler=handler,
            result=SchedulingResult.SKIPPED,
            status_info={
                "pending_reason": reason,
                "nominated_agents": list(preemption.agents),
                "nominated_until": until.isoformat(),
                "preempts": [str(v) for v in preemption.victims],
            },
            message=reason,
        )
    )
    try:
        async with conn.begin_nested():
            applied = await apply_session_transitions(conn, changes)
            if applied.stale or len(applied.applied) != len(changes):
                raise _Abandoned()
    except _Abandoned:
        return None
    return applied


def preempted_events(preemption: Preemption, applied: AppliedTransitions) -> list[UserEvent]:
    """`session.preempted` per victim (its owner sees it), with the agent where it made room."""
    return [
        UserEvent(
            name="session.preempted",
            session_id=str(victim),
            agent_id=(preemption.victim_agents.get(victim) or (None,))[0],
            preempted_by=str(preemption.session_id),
            owner=applied.owners.get(victim),
            detail={"agents": list(preemption.victim_agents.get(victim, ()))},
        )
        for victim in preemption.victims
    ]


async def lapse(conn: AsyncConnection, sessions: Iterable[uuid.UUID], handler: str) -> None:
    """Clear the nomination of PENDING preemptors whose nomination ran out."""
    changes = [
        SessionTransition(
            session_id=sid,
            expected=frozenset({SessionStatus.PENDING}),
            to_status=None,
            handler=handler,
            result=SchedulingResult.EXPIRED,  # the nomination expired; the session stays PENDING
            drop_info=NOMINATION_KEYS,
            message=NOMINATION_LAPSED,
        )
        for sid in sessions
    ]
    if changes:
        await apply_session_transitions(conn, changes)
