"""Guarded session status writes: the only way a session's status changes.

Every write is a compare-and-set: a session moves only if it is still in one of the statuses the
caller expected, and its history row is written in the same transaction. A session that moved
on in the meantime is *stale*: it is left alone and the attempt is recorded as such, never
raised as an error. All statements are batched over the given sessions.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, case, func, insert, select, update
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.bus.user_events import UserEvent
from sokovan.common.types import KernelStatus, SchedulingResult, SessionResult, SessionStatus
from sokovan.db.models import Session, SessionSchedulingHistory
from sokovan.state.kernel_writes import move_kernels_of_sessions
from sokovan.state.status_info import SessionStatusInfo, status_info_of

# Statuses whose kernels are swept along when a session moves and no kernel guard is given.
_LIVE_KERNELS = frozenset(KernelStatus.non_terminal())


@dataclass(frozen=True)
class SessionTransition:
    """Move one session (and optionally its kernels) if it is still where the caller saw it.

    `to_status=None` keeps the status and only records history (and the status_info patch).
    `status_info` is merged into the stored one; `reset_attempts` starts the phase counter anew,
    `attempt` is what the history row shows.
    """

    session_id: uuid.UUID
    expected: frozenset[SessionStatus]
    to_status: SessionStatus | None
    handler: str
    result: SchedulingResult
    kernel_to: KernelStatus | None = None
    kernel_expected: frozenset[KernelStatus] = _LIVE_KERNELS
    session_result: SessionResult | None = None
    status_info: SessionStatusInfo | None = None
    message: str | None = None
    attempt: int = 0
    bump_attempts: bool = False
    reset_attempts: bool = False


@dataclass
class AppliedTransitions:
    applied: list[uuid.UUID] = field(default_factory=list)
    stale: list[uuid.UUID] = field(default_factory=list)
    # session id → (from, to) for the sessions whose status actually changed
    moved: dict[uuid.UUID, tuple[SessionStatus, SessionStatus]] = field(default_factory=dict)
    # session id → owner (user id), for the sessions that moved
    owners: dict[uuid.UUID, str] = field(default_factory=dict)
    # the moved sessions that are replicas of a deployment (their routes care)
    replicas_moved: set[uuid.UUID] = field(default_factory=set)

    def events(self) -> list[UserEvent]:
        return [
            UserEvent(
                name="session.status",
                session_id=str(sid),
                from_status=src.value,
                to_status=dst.value,
                owner=self.owners.get(sid),
            )
            for sid, (src, dst) in self.moved.items()
        ]


async def apply_session_transitions(
    conn: AsyncConnection, transitions: Sequence[SessionTransition]
) -> AppliedTransitions:
    """Apply `transitions` in the caller's transaction; returns what was applied and what was stale."""
    out = AppliedTransitions()
    if not transitions:
        return out
    ids = [t.session_id for t in transitions]
    rows = (
        await conn.execute(
            select(
                Session.id,
                Session.status,
                Session.status_info,
                Session.phase_attempts,
                Session.user_id,
                Session.deployment_id,
            )
            .where(Session.id.in_(ids))
            .with_for_update(key_share=True)  # FOR NO KEY UPDATE: FK checks may still pass
        )
    ).all()
    owners = {r.id: str(r.user_id) for r in rows}
    replicas = {r.id for r in rows if r.deployment_id is not None}
    current = {r.id: (SessionStatus(r.status), status_info_of(r.status_info), r.phase_attempts) for r in rows}
    now = dt.datetime.now(dt.UTC)
    session_rows: list[dict[str, Any]] = []
    history_rows: list[dict[str, Any]] = []
    kernel_moves: dict[tuple[KernelStatus, frozenset[KernelStatus]], list[uuid.UUID]] = {}
    for t in transitions:
        state = current.get(t.session_id)
        if state is None:
            continue
        status, info, attempts = state
        if status not in t.expected:
            out.stale.append(t.session_id)
            history_rows.append(
                _history(t, status, status, f"stale: expected {sorted(t.expected)}, found {status}", now)
            )
            continue
        target = t.to_status or status
        new_info: SessionStatusInfo = {**info, **(t.status_info or {})}
        if target != SessionStatus.PENDING and "pending_reason" not in (t.status_info or {}):
            new_info.pop("pending_reason", None)  # only a waiting session has a reason to wait
        new_attempts = 0 if (t.reset_attempts or target != status) else attempts + int(t.bump_attempts)
        session_rows.append(
            {
                "b_id": t.session_id,
                "b_status": target.value,
                "b_info": new_info,
                "b_attempts": new_attempts,
                "b_changed": now if target != status else None,
                "b_terminated": now if target.is_terminal and not status.is_terminal else None,
                "b_result": t.session_result.value if t.session_result else None,
                "b_set_result": t.session_result is not None,
            }
        )
        history_rows.append(_history(t, status, target, t.message, now))
        out.applied.append(t.session_id)
        if target != status:
            out.moved[t.session_id] = (out.moved.get(t.session_id, (status, target))[0], target)
            out.owners[t.session_id] = owners[t.session_id]
            if t.session_id in replicas:
                out.replicas_moved.add(t.session_id)
        if t.kernel_to is not None:
            kernel_moves.setdefault((t.kernel_to, t.kernel_expected), []).append(t.session_id)
        # Cache the new state so two transitions of one session in a batch chain correctly.
        current[t.session_id] = (target, new_info, new_attempts)
    if session_rows:
        await conn.execute(
            update(Session)
            .where(Session.id == bindparam("b_id"))
            .values(
                status=bindparam("b_status"),
                status_info=bindparam("b_info"),
                phase_attempts=bindparam("b_attempts"),
                status_changed_at=func.coalesce(bindparam("b_changed"), Session.status_changed_at),
                terminated_at=func.coalesce(Session.terminated_at, bindparam("b_terminated")),
                result=_keep_or_set(),
            )
            .execution_options(synchronize_session=False),
            session_rows,
        )
    if history_rows:
        await _record_history(conn, history_rows, now)
    for (kernel_to, kernel_expected), session_ids in kernel_moves.items():
        await move_kernels_of_sessions(
            conn, session_ids, kernel_expected, kernel_to, source="session", now=now
        )
    return out


_MERGE_KEY = ("handler", "result", "from_status", "to_status")


async def _record_history(conn: AsyncConnection, rows: list[dict[str, Any]], now: dt.datetime) -> None:
    """Insert history rows, merging each into its session's latest row when that row has the same
    handler, outcome and statuses (a run repeating itself): the attempt counter goes up and the
    message and time are the latest, so a session retried 50 times has one row saying so."""
    latest = await conn.execute(
        select(
            SessionSchedulingHistory.id,
            SessionSchedulingHistory.session_id,
            SessionSchedulingHistory.attempt,
            *(getattr(SessionSchedulingHistory, k) for k in _MERGE_KEY),
        )
        .where(SessionSchedulingHistory.session_id.in_({r["session_id"] for r in rows}))
        .ext(distinct_on(SessionSchedulingHistory.session_id))
        .order_by(SessionSchedulingHistory.session_id, SessionSchedulingHistory.id.desc())
    )
    last = {r.session_id: r for r in latest}
    merges: list[dict[str, Any]] = []
    inserts: list[dict[str, Any]] = []
    for row in rows:
        prev = last.get(row["session_id"])
        if prev is not None and all(getattr(prev, k) == row[k] for k in _MERGE_KEY):
            merges.append(
                {
                    "b_id": prev.id,
                    "b_attempt": max(prev.attempt + 1, row["attempt"]),
                    "b_message": row["message"],
                }
            )
        else:
            inserts.append(row)
    if merges:
        await conn.execute(
            update(SessionSchedulingHistory)
            .where(SessionSchedulingHistory.id == bindparam("b_id"))
            .values(attempt=bindparam("b_attempt"), message=bindparam("b_message"), updated_at=now)
            .execution_options(synchronize_session=False),
            merges,
        )
    if inserts:
        await conn.execute(insert(SessionSchedulingHistory), inserts)


def _keep_or_set() -> Any:
    return case((bindparam("b_set_result"), bindparam("b_result")), else_=Session.result)


def _history(
    t: SessionTransition,
    from_status: SessionStatus,
    to_status: SessionStatus,
    message: str | None,
    now: dt.datetime,
) -> dict[str, Any]:
    return {
        "session_id": t.session_id,
        "handler": t.handler,
        "result": t.result.value,
        "from_status": from_status.value,
        "to_status": to_status.value,
        "message": message,
        "attempt": t.attempt,
        "created_at": now,
    }
