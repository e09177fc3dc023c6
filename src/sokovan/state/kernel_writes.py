"""Guarded kernel status writes: the only way a kernel's status changes.

A kernel moves only while it is still in a status the caller expected (and, for agent events, still
placed on the agent that reported it); its history row goes in the same transaction. Rows are locked
in id order by every writer, so two writers never deadlock on the same kernels.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.bus.user_events import UserEvent
from sokovan.common import json_text
from sokovan.common.types import KernelStatus


async def move_kernels_of_sessions(
    conn: AsyncConnection,
    session_ids: Sequence[uuid.UUID],
    expected: frozenset[KernelStatus],
    to_status: KernelStatus,
    *,
    source: str,
    now: dt.datetime | None = None,
) -> list[uuid.UUID]:
    """Move every kernel of `session_ids` that is in `expected` to `to_status` (guarded, batched)."""
    now = now or dt.datetime.now(dt.UTC)
    if not session_ids:
        return []
    moved = await conn.execute(
        _MOVES[_shape(to_status)],
        {
            "sessions": list(session_ids),
            "expected": sorted(s.value for s in expected),
            "to": to_status.value,
            "now": now,
            "source": source,
        },
    )
    return [r.id for r in moved]


def _shape(to_status: KernelStatus) -> str:
    """Which of `_MOVES` moves kernels to `to_status`: what else an end or a requeue sets."""
    return "ended" if to_status.is_terminal else "queued" if to_status == KernelStatus.PENDING else "moved"


def _move_statement(extra: str) -> TextClause:
    """One statement, one round trip: lock the kernels in id order (as the agent-event writer
    does: two writers taking the same rows in different orders deadlock, and each deadlock costs a
    second of detection), move those in an expected status, and write their history. The status is
    judged on what the lock read (see `session_moves`)."""
    return text(
        f"""
        WITH locked AS MATERIALIZED (
            SELECT id, status FROM kernels
            WHERE session_id = ANY(CAST(:sessions AS uuid[]))
            ORDER BY id
            FOR NO KEY UPDATE
        ), moved AS (
            UPDATE kernels AS k SET status = :to, status_changed_at = :now{extra}
            FROM locked
            WHERE k.id = locked.id AND locked.status = ANY(CAST(:expected AS text[]))
            RETURNING k.id, k.session_id
        ), written AS (
            INSERT INTO kernel_scheduling_history
                (kernel_id, session_id, source, from_status, to_status, message, created_at)
            SELECT id, session_id, :source, NULL, :to, NULL, :now FROM moved
        )
        SELECT id FROM moved ORDER BY id
        """
    )


_MOVES: dict[str, TextClause] = {
    "ended": _move_statement(", terminated_at = coalesce(k.terminated_at, :now)"),
    "queued": _move_statement(", agent_id = NULL"),  # back in the queue: it holds nothing on any agent
    "moved": _move_statement(""),
}


@dataclass(frozen=True)
class KernelTransition:
    """Move one kernel if it is still in `expected` (used for agent events)."""

    kernel_id: uuid.UUID
    expected: frozenset[KernelStatus]
    to_status: KernelStatus
    source: str
    exit_code: int | None = None
    status_info: dict[str, Any] | None = None
    message: str | None = None
    # When set, the kernel moves only if it is placed on this agent (events from a stale agent
    # about a kernel that has been rescheduled elsewhere are ignored).
    agent_id: str | None = None
    # Where the kernel's HTTP server answers (inference kernels); written only when set.
    service_addr: str | None = None
    # The image the kernel runs (resolved reference) and its digest (container agents); written only
    # when set.
    image_ref: str | None = None
    image_digest: str | None = None


@dataclass(frozen=True)
class KernelMove:
    kernel_id: uuid.UUID
    session_id: uuid.UUID
    agent_id: str | None
    from_status: str
    to_status: str
    owner: str

    def event(self) -> UserEvent:
        return UserEvent(
            name="kernel.status",
            session_id=str(self.session_id),
            kernel_id=str(self.kernel_id),
            agent_id=self.agent_id,
            from_status=self.from_status,
            to_status=self.to_status,
            owner=self.owner,
        )


# One statement for a batch (at most one transition per kernel): the kernels locked in id order
# with their sessions' owners (FOR NO KEY UPDATE: FK checks may still pass), as they are now (a
# lock waits for a concurrent writer, then reads its version, which the UPDATE also works on);
# those still in an expected status (and on the agent that reported, where one is named) moved,
# with their history rows in the batch's order. It returns every kernel found and whether it moved.
# The UPDATE judges what the lock read, not the row's own columns (see `session_moves`).
_APPLY = text(
    """
    WITH v AS (
        SELECT * FROM ROWS FROM (jsonb_to_recordset(CAST(:batch AS jsonb)) AS (
            id uuid, expected text[], to_status text, agent text, exit_code int, info jsonb,
            terminal bool, addr text, image text, digest text, source text, message text
        )) WITH ORDINALITY AS v
    ), cur AS MATERIALIZED (
        SELECT k.id, k.status, k.session_id, k.agent_id, s.user_id
        FROM kernels k JOIN sessions s ON s.id = k.session_id
        WHERE k.id IN (SELECT unnest(CAST(:ids AS uuid[])))
        ORDER BY k.id
        FOR NO KEY UPDATE OF k
    ), moved AS (
        UPDATE kernels AS k SET
            status = v.to_status,
            status_changed_at = :now,
            status_info = coalesce(k.status_info, '{}'::jsonb) || coalesce(v.info, '{}'::jsonb),
            exit_code = coalesce(v.exit_code, k.exit_code),
            terminated_at = coalesce(
                k.terminated_at, CASE WHEN v.terminal THEN CAST(:now AS timestamptz) END),
            service_addr = coalesce(v.addr, k.service_addr),
            image_ref = coalesce(v.image, k.image_ref),
            image_digest = coalesce(v.digest, k.image_digest)
        FROM v JOIN cur ON cur.id = v.id
        WHERE k.id = v.id AND cur.status = ANY(v.expected) AND (v.agent IS NULL OR cur.agent_id = v.agent)
        RETURNING k.id
    ), written AS (
        INSERT INTO kernel_scheduling_history
            (kernel_id, session_id, source, from_status, to_status, message, created_at)
        SELECT v.id, cur.session_id, v.source, cur.status, v.to_status, v.message, :now
        FROM v JOIN cur ON cur.id = v.id JOIN moved m ON m.id = v.id
        ORDER BY v.ordinality
    )
    SELECT cur.id, cur.status, cur.session_id, cur.agent_id, cur.user_id, m.id IS NOT NULL AS moved
    FROM cur LEFT JOIN moved m ON m.id = cur.id
    """
)


async def apply_kernel_transitions(
    conn: AsyncConnection, transitions: Sequence[KernelTransition]
) -> list[KernelMove]:
    """Move kernels that are still where each transition expects them (at most one transition
    per kernel), in one statement: on a connection without a transaction it is one of its own.
    Rows are locked in id order, so concurrent batches cannot deadlock on them. Returns the
    kernels that moved."""
    if not transitions:
        return []
    batch = [
        {
            "id": str(t.kernel_id),
            "expected": sorted(s.value for s in t.expected),
            "to_status": t.to_status.value,
            "agent": t.agent_id,
            "exit_code": t.exit_code,
            "info": t.status_info or {},
            "terminal": t.to_status.is_terminal,
            "addr": t.service_addr,
            "image": t.image_ref,
            "digest": t.image_digest,
            "source": t.source,
            "message": t.message,
        }
        for t in transitions
    ]
    params = {
        "batch": json_text.dumps(batch, as_text=True),
        "ids": [t.kernel_id for t in transitions],
        "now": dt.datetime.now(dt.UTC),
    }
    found = {r.id: r for r in await conn.execute(_APPLY, params)}
    moved: list[KernelMove] = []
    for t in transitions:
        row = found.get(t.kernel_id)
        if row is not None and row.moved:
            moved.append(
                KernelMove(
                    t.kernel_id, row.session_id, row.agent_id, row.status, t.to_status.value, str(row.user_id)
                )
            )
    return moved
