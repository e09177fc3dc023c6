"""Guarded session status writes: the only way a session's status changes.

Every write is a compare-and-set: a session moves only if it is still in one of the statuses the
caller expected, and its history row is written with it. A session that moved on in the meantime
is *stale*: it is left alone and the attempt is recorded as such, never raised as an error. All
statements are batched over the given sessions; a batch of hand-offs is one statement
(`session_moves`), anything else a few (`apply_in_steps`).

A session leaving PENDING loses what only a waiting session has (its pending_reason and a
preemptor's nomination). A transition may drop status_info keys (`drop_info`) and, for the one
path from TERMINATING back to PENDING (a requeued preemption victim), replace the session's ended
kernels by new PENDING ones (`replace_kernels`): the history row names the old kernels.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, text, update
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common import json_text
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.among import among, among_bound
from sokovan.db.models import Kernel, Session, SessionSchedulingHistory
from sokovan.state.kernel_writes import move_kernels_of_sessions
from sokovan.state.session_moves import apply_moves, moves_only, removed_keys
from sokovan.state.session_transition import AppliedTransitions as AppliedTransitions
from sokovan.state.session_transition import SessionTransition as SessionTransition
from sokovan.state.status_info import SessionStatusInfo, status_info_of

# The sessions of a batch, locked and read (FOR NO KEY UPDATE: FK checks may still pass).
_LOCK = (
    select(
        Session.id,
        Session.status,
        Session.status_info,
        Session.phase_attempts,
        Session.user_id,
        Session.deployment_id,
        Session.resources,
        Session.cluster_size,
    )
    .where(among_bound(Session.id))
    .with_for_update(key_share=True)
)


async def apply_session_transitions(
    conn: AsyncConnection, transitions: Sequence[SessionTransition]
) -> AppliedTransitions:
    """Apply `transitions` in the caller's transaction; returns what was applied and what was stale."""
    out = AppliedTransitions()
    if not transitions:
        return out
    if moves_only(transitions):  # hand-offs: one statement (`session_moves`)
        stale = await apply_moves(conn, transitions, out)
        if stale:
            await _write_history(
                conn, [_history(t, s, s, _stale(t, s), dt.datetime.now(dt.UTC)) for t, s in stale]
            )
        return out
    return await apply_in_steps(conn, transitions, out)


async def apply_in_steps(
    conn: AsyncConnection, transitions: Sequence[SessionTransition], out: AppliedTransitions | None = None
) -> AppliedTransitions:
    """The general path: the sessions locked and read, then their new state and history, their
    kernels' moves and any replacements, decided here between the statements."""
    out = out if out is not None else AppliedTransitions()
    if any(t.then_to is not None for t in transitions):
        raise ValueError("a two-step move is written only with other hand-offs (session_moves)")
    rows = (await conn.execute(_LOCK, {"ids": [t.session_id for t in transitions]})).all()
    owners = {r.id: str(r.user_id) for r in rows}
    replicas = {r.id for r in rows if r.deployment_id is not None}
    current = {r.id: (SessionStatus(r.status), status_info_of(r.status_info), r.phase_attempts) for r in rows}
    shapes = {r.id: (r.resources, r.cluster_size) for r in rows}
    old_kernels = await _kernel_ids(conn, [t.session_id for t in transitions if t.replace_kernels])
    replaced: list[uuid.UUID] = []
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
            history_rows.append(_history(t, status, status, _stale(t, status), now))
            continue
        target = t.to_status or status
        new_info: SessionStatusInfo = {**info, **(t.status_info or {})}
        for key in removed_keys(t, target):
            new_info.pop(key, None)  # type: ignore[misc]
        new_attempts = 0 if (t.reset_attempts or target != status) else attempts + int(t.bump_attempts)
        session_rows.append(
            {
                "id": str(t.session_id),
                "status": target.value,
                "info": new_info,
                "attempts": new_attempts,
                "changed": now.isoformat() if target != status else None,
                "terminated": now.isoformat() if target.is_terminal and not status.is_terminal else None,
                "result": t.session_result.value if t.session_result else None,
                "set_result": t.session_result is not None,
            }
        )
        message = t.message
        if t.replace_kernels:
            replaced.append(t.session_id)
            old = ", ".join(str(k) for k in old_kernels.get(t.session_id, []))
            message = f"{message}; old kernels: {old}" if message else f"old kernels: {old}"
        history_rows.append(_history(t, status, target, message, now))
        out.applied.append(t.session_id)
        if target != status:
            out.moved[t.session_id] = (out.moved.get(t.session_id, (status, target))[0], target)
            out.owners[t.session_id] = owners[t.session_id]
            if t.session_id in replicas:
                out.replicas_moved.add(t.session_id)
        elif target == SessionStatus.PENDING and new_info.get("pending_reason") != info.get("pending_reason"):
            reason = new_info.get("pending_reason")
            if reason:
                out.reasons[t.session_id] = reason
                out.owners[t.session_id] = owners[t.session_id]
        if t.kernel_to is not None:
            kernel_moves.setdefault((t.kernel_to, t.kernel_expected), []).append(t.session_id)
        # Cache the new state so two transitions of one session in a batch chain correctly.
        current[t.session_id] = (target, new_info, new_attempts)
    await _write_history(conn, history_rows, session_rows, now)
    for (kernel_to, kernel_expected), session_ids in kernel_moves.items():
        await move_kernels_of_sessions(
            conn, session_ids, kernel_expected, kernel_to, source="session", now=now
        )
    if replaced:
        await _replace_kernels(conn, {sid: shapes[sid] for sid in replaced})
    return out


def _stale(t: SessionTransition, found: SessionStatus) -> str:
    """The history message of a transition that found its session moved on, in status values:
    `stale: expected TERMINATING, found TERMINATED` (`A or B` when it expected either)."""
    expected = " or ".join(sorted(status.value for status in t.expected))
    return f"stale: expected {expected}, found {found.value}"


async def _write_history(
    conn: AsyncConnection,
    history_rows: list[dict[str, Any]],
    session_rows: Sequence[dict[str, Any]] = (),
    now: dt.datetime | None = None,
) -> None:
    """The sessions' new state and their history rows, merging a repeated run into its session's
    latest row (`_history_plan`)."""
    inserts, merges = await _history_plan(conn, history_rows)
    if session_rows or inserts:
        final = _final(list(session_rows))
        ids = [row["id"] for row in final]
        history = json_text.dumps(inserts, as_text=True)
        await conn.execute(_WRITE, {"sessions": json_text.dumps(final), "ids": ids, "history": history})
    if merges:
        await conn.execute(_MERGE, [{**m, "b_now": now or dt.datetime.now(dt.UTC)} for m in merges])


async def _kernel_ids(
    conn: AsyncConnection, session_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[uuid.UUID]]:
    out: dict[uuid.UUID, list[uuid.UUID]] = {}
    if not session_ids:
        return out
    rows = await conn.execute(
        select(Kernel.session_id, Kernel.id)
        .where(among(Kernel.session_id, session_ids))
        .order_by(Kernel.session_id, Kernel.cluster_idx)
    )
    for sid, kid in rows:
        out.setdefault(sid, []).append(kid)
    return out


async def _replace_kernels(conn: AsyncConnection, shapes: dict[uuid.UUID, tuple[Any, int]]) -> None:
    """The sessions' kernels (all ended: the caller's guard) make way for new PENDING ones, one per
    cluster member with the session's per-kernel slots, as when it was created."""
    await conn.execute(delete(Kernel).where(Kernel.session_id.in_(list(shapes))))
    await conn.execute(
        insert(Kernel),
        [
            {
                "session_id": sid,
                "cluster_role": "main" if i == 0 else "sub",
                "cluster_idx": i,
                "status": KernelStatus.PENDING.value,
                "occupied_slots": resources,
            }
            for sid, (resources, size) in shapes.items()
            for i in range(size)
        ],
    )


_MERGE_KEY = ("handler", "result", "from_status", "to_status")

# The sessions' new state and the history rows, in one statement (one round trip). Each session
# appears once in `sessions` (`_final`); history rows keep their order, so their ids do too.
_WRITE = text(
    """
    WITH v AS (
        SELECT * FROM jsonb_to_recordset(CAST(:sessions AS jsonb)) AS v(
            id uuid, status text, info jsonb, attempts int, changed timestamptz,
            terminated timestamptz, result text, set_result bool)
    ), moved AS (
        UPDATE sessions AS s SET
            status = v.status,
            status_info = v.info,
            phase_attempts = v.attempts,
            status_changed_at = coalesce(v.changed, s.status_changed_at),
            terminated_at = coalesce(s.terminated_at, v.terminated),
            result = CASE WHEN v.set_result THEN v.result ELSE s.result END
        FROM v WHERE s.id = v.id AND s.id IN (SELECT unnest(CAST(:ids AS uuid[])))
    )
    INSERT INTO session_scheduling_history
        (session_id, handler, result, from_status, to_status, message, attempt, created_at)
    SELECT h.session_id, h.handler, h.result, h.from_status, h.to_status, h.message, h.attempt, h.created_at
    FROM ROWS FROM (jsonb_to_recordset(CAST(:history AS jsonb)) AS (
        session_id uuid, handler text, result text, from_status text, to_status text, message text,
        attempt int, created_at timestamptz)) WITH ORDINALITY AS h
    ORDER BY h.ordinality
    """
)


def _final(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per session, as writing `rows` one after another would leave it: the last status,
    status_info and attempts; the latest status change; the first end; the last result set."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        prev = out.get(row["id"])
        if prev is None:
            out[row["id"]] = dict(row)
            continue
        prev.update(status=row["status"], info=row["info"], attempts=row["attempts"])
        prev["changed"] = row["changed"] or prev["changed"]
        prev["terminated"] = prev["terminated"] or row["terminated"]
        if row["set_result"]:
            prev["result"], prev["set_result"] = row["result"], True
    return list(out.values())


# Each session's latest history row (what a repeated run merges into).
_LATEST = (
    select(
        SessionSchedulingHistory.id,
        SessionSchedulingHistory.session_id,
        SessionSchedulingHistory.attempt,
        *(getattr(SessionSchedulingHistory, k) for k in _MERGE_KEY),
    )
    .where(among_bound(SessionSchedulingHistory.session_id))
    .ext(distinct_on(SessionSchedulingHistory.session_id))
    .order_by(SessionSchedulingHistory.session_id, SessionSchedulingHistory.id.desc())
)


# A repeated run merged into its session's latest row (an executemany).
_MERGE = (
    update(SessionSchedulingHistory)
    .where(SessionSchedulingHistory.id == bindparam("b_id"))
    .values(attempt=bindparam("b_attempt"), message=bindparam("b_message"), updated_at=bindparam("b_now"))
    .execution_options(synchronize_session=False)
)


async def _history_plan(
    conn: AsyncConnection, rows: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Which history rows are inserted and which merge into their session's latest row (returned
    as updates of it): a row merges when the latest has the same handler, outcome and statuses (a
    run repeating itself): the attempt counter goes up and the message and time are the latest,
    so a session retried 50 times has one row saying so.

    Only a row that leaves the status as it was can repeat the latest one: a move (from one status
    to another) follows a row that took the session into its `from` status, since every status
    change writes its row here. So the latest rows are read only for the sessions that stay, and a
    batch of moves (the common case: every hand-off) reads nothing."""
    staying = {r["session_id"] for r in rows if r["from_status"] == r["to_status"]}
    last: dict[uuid.UUID, Any] = {}
    if staying:
        latest = await conn.execute(_LATEST, {"ids": list(staying)})
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
    return inserts, merges


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
        "created_at": now.isoformat(),
    }
