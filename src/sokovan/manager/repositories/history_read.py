"""Read side of handler runs: a session's scheduling history, oldest first, and what one history
row says (`handler_run`, shared with deployments' and routes' histories)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.db.models import SessionSchedulingHistory
from sokovan.manager.repositories.paging import page_after_key
from sokovan.manager.repositories.sessions_read import iso_utc


async def list_history(
    conn: AsyncConnection,
    session_id: uuid.UUID,
    limit: int,
    cursor: str | None,
    *,
    moves_only: bool = False,
) -> tuple[list[dict[str, Any]], str | None]:
    """Oldest first. The caller has already checked that the session is visible. With
    `moves_only`, the rows of handler runs that moved nothing (the same status before and after)
    are left out; a run that names no status at all is kept (it says something else happened);
    the cursor stays the row id, so pages of either kind follow on."""
    query = select(*SessionSchedulingHistory.__table__.c).where(
        SessionSchedulingHistory.session_id == session_id
    )
    if moves_only:
        query = query.where(
            or_(
                SessionSchedulingHistory.from_status.is_distinct_from(SessionSchedulingHistory.to_status),
                SessionSchedulingHistory.to_status.is_(None),
            )
        )
    rows, next_cursor = await page_after_key(
        conn, query, SessionSchedulingHistory.id, "id", int, limit, cursor
    )
    return [
        {**handler_run(h), "attempt": h.attempt, "created_at": iso_utc(h.created_at)} for h in rows
    ], next_cursor


def handler_run(row: Any) -> dict[str, Any]:
    """What a history row (of a session, a deployment or a route) says: which handler moved what."""
    return {
        "handler": row.handler,
        "result": row.result,
        "from_status": row.from_status,
        "to_status": row.to_status,
        "message": row.message,
    }
