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

from sqlalchemy import String, TextClause, bindparam, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.bus.user_events import UserEvent
from sokovan.common.types import KernelStatus
from sokovan.db.among import among_bound
from sokovan.db.models import Kernel, KernelSchedulingHistory, Session


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
    second of detection), move those still in an expected status, and write their history."""
    return text(
        f"""
        WITH locked AS MATERIALIZED (
            SELECT id FROM kernels
            WHERE session_id = ANY(CAST(:sessions AS uuid[])) AND status = ANY(CAST(:expected AS text[]))
            ORDER BY id
            FOR NO KEY UPDATE
        ), moved AS (
            UPDATE kernels AS k SET status = :to, status_changed_at = :now{extra}
            FROM locked
            WHERE k.id = locked.id AND k.status = ANY(CAST(:expected AS text[]))
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


# The kernels of a batch with their sessions' owners, locked in id order (FOR NO KEY UPDATE: FK
# checks may still pass), and the move of one of them (an executemany): both built once.
_LOCK = (
    select(
        Kernel.id,
        Kernel.status,
        Kernel.session_id,
        Kernel.status_info,
        Kernel.agent_id,
        Kernel.exit_code,
        Session.user_id,
    )
    .join(Session, Session.id == Kernel.session_id)
    .where(among_bound(Kernel.id))
    .order_by(Kernel.id)
    .with_for_update(of=Kernel, key_share=True)
)
_MOVE = (
    update(Kernel)
    .where(Kernel.id == bindparam("b_id"))
    .values(
        status=bindparam("b_status"),
        status_changed_at=bindparam("b_now"),
        status_info=bindparam("b_info"),
        exit_code=bindparam("b_exit"),
        terminated_at=func.coalesce(Kernel.terminated_at, bindparam("b_terminated")),
        service_addr=func.coalesce(bindparam("b_addr", type_=String), Kernel.service_addr),
    )
    .execution_options(synchronize_session=False)
)


async def apply_kernel_transitions(
    conn: AsyncConnection, transitions: Sequence[KernelTransition]
) -> list[KernelMove]:
    """Move kernels that are still where each transition expects them (at most one transition
    per kernel). Rows are locked in id order, so concurrent batches cannot deadlock on them.
    Returns the kernels that moved."""
    if not transitions:
        return []
    now = dt.datetime.now(dt.UTC)
    rows = await conn.execute(_LOCK, {"ids": [t.kernel_id for t in transitions]})
    current = {r.id: r for r in rows}
    updates: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    moved: list[KernelMove] = []
    for t in transitions:
        row = current.get(t.kernel_id)
        if row is None or KernelStatus(row.status) not in t.expected:
            continue
        if t.agent_id is not None and row.agent_id != t.agent_id:
            continue
        updates.append(
            {
                "b_id": t.kernel_id,
                "b_status": t.to_status.value,
                "b_info": {**(row.status_info or {}), **(t.status_info or {})},
                "b_exit": t.exit_code if t.exit_code is not None else row.exit_code,
                "b_terminated": now if t.to_status.is_terminal else None,
                "b_addr": t.service_addr,
                "b_now": now,
            }
        )
        history.append(
            {
                "kernel_id": t.kernel_id,
                "session_id": row.session_id,
                "source": t.source,
                "from_status": row.status,
                "to_status": t.to_status.value,
                "message": t.message,
                "created_at": now,
            }
        )
        moved.append(
            KernelMove(
                t.kernel_id, row.session_id, row.agent_id, row.status, t.to_status.value, str(row.user_id)
            )
        )
    if updates:
        await conn.execute(_MOVE, updates)
        await conn.execute(insert(KernelSchedulingHistory), history)
    return moved
