"""A batch of hand-offs written in one statement: the common case of `session_writes`.

Every hand-off of a session from one lane to the next (PENDING→SCHEDULED, SCHEDULED→PREPARING,
…, and the promotions the agents' events complete) moves each session of its batch once, to a
status it did not expect to find it in, and sweeps its kernels along. Such a batch needs nothing
from the sessions' rows before it writes them: the compare-and-set, the status_info merge, the
history rows and the kernels' moves (locked in id order, as every kernel writer does) are one
statement, so one round trip, and on a connection without a transaction no BEGIN and COMMIT
either (a single statement is its own transaction). Anything else (a transition that may leave
the status as it was, so its history may merge into the latest row; two transitions of one
session; a requeue that replaces kernels) takes the general path of `session_writes`.

A hand-off may carry a second step (`SessionTransition.then_to`: an agent call's success and the
promotion its agents' answers already met, `orchestrator.schedule.answered_moves`): the session
goes on to that status with a second history row, its kernels to `kernel_to` with a history row
of source `agent:answer`, and the statement returns those kernels' moves for their
`kernel.status` events.

Sessions found in a status the transition did not expect are stale, as on the general path: they
are left alone, and the caller writes their history rows after the statement (a stale row may
merge into its session's latest, as on the general path).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.bus.user_events import UserEvent
from sokovan.common import foresight, json_text
from sokovan.common.preemption import NOMINATED_AGENTS, NOMINATED_UNTIL, PREEMPTS
from sokovan.common.types import KernelStatus, SchedulingResult, SessionStatus

if TYPE_CHECKING:
    from sokovan.state.session_transition import AppliedTransitions, SessionTransition

_TERMINAL = sorted(s.value for s in SessionStatus.terminal())
_SUCCESS = SchedulingResult.SUCCESS.value  # the result of a two-step move's second step
# What only a waiting (PENDING) session carries: dropped when it moves on.
WAITING_KEYS = ("pending_reason", NOMINATED_AGENTS, NOMINATED_UNTIL, PREEMPTS, *foresight.KEYS)


def removed_keys(t: SessionTransition, target: SessionStatus) -> list[str]:
    """The status_info keys a transition to `target` removes, after its patch is merged: leaving
    PENDING drops what only a waiting session carries (unless the transition sets it), and
    `drop_info` goes whatever the patch said. Both write paths apply this one rule."""
    patch = t.status_info or {}
    waiting = [k for k in WAITING_KEYS if k not in patch] if target != SessionStatus.PENDING else []
    return waiting + sorted(t.drop_info)


def moves_only(transitions: Sequence[SessionTransition]) -> bool:
    """Whether `transitions` is a batch of hand-offs: each session once, each to a status outside
    those it expects (so an applied transition always changes the status), nothing replaced."""
    ids = {t.session_id for t in transitions}
    return len(ids) == len(transitions) and all(
        t.to_status is not None
        and t.to_status not in t.expected
        and not t.replace_kernels
        and t.then_to not in t.expected
        and t.then_to != t.to_status
        for t in transitions
    )


def _row(t: SessionTransition) -> dict[str, Any]:
    assert t.to_status is not None
    kernel_to = t.kernel_to
    return {
        "id": str(t.session_id),
        "expected": sorted(s.value for s in t.expected),
        "to_status": t.to_status.value,
        "terminal": t.to_status.is_terminal,
        "patch": dict(t.status_info or {}),
        "strip": removed_keys(t, t.to_status),
        "result": t.session_result.value if t.session_result else None,
        "set_result": t.session_result is not None,
        "handler": t.handler,
        "outcome": t.result.value,
        "message": t.message,
        "attempt": t.attempt,
        "kernel_to": kernel_to.value if kernel_to is not None else None,
        "kernel_expected": sorted(s.value for s in t.kernel_expected),
        "kernel_ended": kernel_to is not None and kernel_to.is_terminal,
        "kernel_queued": kernel_to == KernelStatus.PENDING,
        "then_to": t.then_to.value if t.then_to is not None else None,
        "then_handler": t.then_handler,
    }


# The batch `v` (one row per session, in the callers' order); the sessions locked in id order and
# read as they are now (`cur`: under READ COMMITTED a lock waits for a concurrent writer and then
# reads its version); the moves of those in an expected status, with their history; their kernels
# locked in id order, and those in an expected status moved, with theirs. What it returns is
# each session found: where it was, whether it moved, its owner and deployment.
#
# The sessions are found through the ids as an array parameter (`IN (SELECT unnest(:ids))`), not
# by a join on the JSON batch: PostgreSQL guesses a hundred rows for `jsonb_to_recordset`, and past
# a few thousand sessions that guess made it read the whole table at every write instead of
# probing the primary key. Not `= ANY(:ids)` either: for a batch of thousands the planner may scan
# the table and test each row against the whole array (seconds for 5,000).
#
# Statuses are judged only on what the locking reads returned, never in their WHERE or the
# UPDATEs' own: a statement first matches the versions of rows its snapshot sees, which a writer
# that committed while the lock waited has replaced; a condition on the old version skips the row,
# while one on the locked version lets PostgreSQL follow the row to its newest version.
_MOVE = text(
    """
    WITH v AS (
        SELECT * FROM ROWS FROM (jsonb_to_recordset(CAST(:batch AS jsonb)) AS (
            id uuid, expected text[], to_status text, terminal bool, patch jsonb, strip text[],
            result text, set_result bool, handler text, outcome text, message text, attempt int,
            kernel_to text, kernel_expected text[], kernel_ended bool, kernel_queued bool,
            then_to text, then_handler text
        )) WITH ORDINALITY AS v
    ), cur AS MATERIALIZED (
        SELECT s.id, s.status, s.user_id, s.deployment_id FROM sessions s
        WHERE s.id IN (SELECT unnest(CAST(:ids AS uuid[])))
        ORDER BY s.id
        FOR NO KEY UPDATE
    ), moved AS (
        UPDATE sessions AS s SET
            status = coalesce(v.then_to, v.to_status),
            status_info = (s.status_info || v.patch) - v.strip,
            phase_attempts = 0,
            status_changed_at = :now,
            terminated_at = CASE
                WHEN v.terminal AND NOT (cur.status = ANY(CAST(:terminal AS text[])))
                THEN coalesce(s.terminated_at, :now) ELSE s.terminated_at END,
            result = CASE WHEN v.set_result THEN v.result ELSE s.result END
        FROM v JOIN cur ON cur.id = v.id
        WHERE s.id = v.id AND cur.status = ANY(v.expected)
        RETURNING s.id, cur.status AS from_status
    ), history AS (
        INSERT INTO session_scheduling_history
            (session_id, handler, result, from_status, to_status, message, attempt, created_at)
        SELECT id, handler, outcome, from_status, to_status, message, attempt, :now FROM (
            SELECT v.id, v.handler, v.outcome, m.from_status, v.to_status, v.message, v.attempt,
                   v.ordinality, 0 AS step
            FROM v JOIN moved m ON m.id = v.id
            UNION ALL
            SELECT v.id, v.then_handler, :success, v.to_status, v.then_to, NULL, 0, v.ordinality, 1
            FROM v JOIN moved m ON m.id = v.id WHERE v.then_to IS NOT NULL
        ) AS steps
        ORDER BY ordinality, step
    ), klocked AS MATERIALIZED (
        SELECT k.id, k.status FROM kernels k JOIN v ON v.id = k.session_id
        WHERE v.kernel_to IS NOT NULL AND k.session_id IN (SELECT id FROM moved)
        ORDER BY k.id
        FOR NO KEY UPDATE OF k
    ), kmoved AS (
        UPDATE kernels AS k SET
            status = v.kernel_to,
            status_changed_at = :now,
            terminated_at = CASE WHEN v.kernel_ended THEN coalesce(k.terminated_at, :now)
                                 ELSE k.terminated_at END,
            agent_id = CASE WHEN v.kernel_queued THEN NULL ELSE k.agent_id END
        FROM klocked, v
        WHERE k.id = klocked.id AND v.id = k.session_id AND klocked.status = ANY(v.kernel_expected)
        RETURNING k.id, k.session_id, k.agent_id, klocked.status AS from_status, v.kernel_to,
                  v.then_to IS NOT NULL AS answered
    ), khistory AS (
        INSERT INTO kernel_scheduling_history
            (kernel_id, session_id, source, from_status, to_status, message, created_at)
        SELECT id, session_id, CASE WHEN answered THEN 'agent:answer' ELSE 'session' END, NULL, kernel_to,
               NULL, :now
        FROM kmoved ORDER BY id
    ), kanswered AS (
        SELECT session_id, json_agg(json_build_array(id, agent_id, from_status, kernel_to)) AS kernels
        FROM kmoved WHERE answered GROUP BY session_id
    )
    SELECT cur.id, cur.status, cur.user_id, cur.deployment_id, m.id IS NOT NULL AS moved, ka.kernels
    FROM cur LEFT JOIN moved m ON m.id = cur.id LEFT JOIN kanswered ka ON ka.session_id = cur.id
    """
)


async def apply_moves(
    conn: AsyncConnection,
    transitions: Sequence[SessionTransition],
    out: AppliedTransitions,
) -> list[tuple[SessionTransition, SessionStatus]]:
    """Write a batch of hand-offs (`moves_only`) in one statement, filling `out`; returns the stale
    transitions with the status each session was found in, whose history the caller writes."""
    now = dt.datetime.now(dt.UTC)
    batch = json_text.dumps([_row(t) for t in transitions])
    ids = [t.session_id for t in transitions]
    params = {"batch": batch, "ids": ids, "now": now, "terminal": _TERMINAL, "success": _SUCCESS}
    rows = (await conn.execute(_MOVE, params)).all()
    found: dict[uuid.UUID, Any] = {r.id: r for r in rows}
    stale: list[tuple[SessionTransition, SessionStatus]] = []
    for t in transitions:
        row = found.get(t.session_id)
        if row is None:
            continue  # gone: as on the general path, nothing to record
        status = SessionStatus(row.status)
        if not row.moved:
            out.stale.append(t.session_id)
            stale.append((t, status))
            continue
        assert t.to_status is not None
        out.applied.append(t.session_id)
        out.moved[t.session_id] = (status, t.then_to or t.to_status)
        out.owners[t.session_id] = str(row.user_id)
        if t.then_to is not None:
            out.via[t.session_id] = t.to_status
            out.kernel_events += _kernel_events(t.session_id, str(row.user_id), row.kernels or [])
        if row.deployment_id is not None:
            out.replicas_moved.add(t.session_id)
    return stale


def _kernel_events(session_id: uuid.UUID, owner: str, kernels: list[list[str]]) -> list[UserEvent]:
    """The `kernel.status` events of the kernels a two-step move swept along: what the agents'
    events they answered with would have told, had they been applied on their own."""
    return [
        UserEvent(
            name="kernel.status",
            session_id=str(session_id),
            kernel_id=kernel_id,
            agent_id=agent_id,
            from_status=src,
            to_status=dst,
            owner=owner,
        )
        for kernel_id, agent_id, src, dst in kernels
    ]
