"""Guarded status writes for deployments and routes, with their history, in the caller's transaction.

The same rule as for sessions: an entity moves only while it is still in a status the caller
expected (compare-and-set under a row lock); one that moved on meanwhile is stale and left alone.
Each applied outcome gets a history row (handler, SUCCESS / FAILURE / STALE, from, to), except a
repeat of the entity's latest row (a handler that keeps failing the same way writes one row, not one
per cycle). All statements are batched.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.db.among import among
from sokovan.db.models import Deployment, DeploymentHistory, Route, RouteHistory


@dataclass(frozen=True)
class EntityTable:
    """Where one kind of entity and its history live."""

    model: type[Deployment] | type[Route]
    history: type[DeploymentHistory] | type[RouteHistory]
    history_fk: str  # the history's column naming the entity
    ended_column: str  # stamped when the entity reaches a terminal status
    terminal: frozenset[str]


@dataclass(frozen=True)
class EntityTransition:
    """Move one entity to `to_status` (None: keep it, record history only) if still in `expected`."""

    entity_id: uuid.UUID
    expected: frozenset[str]
    to_status: str | None
    handler: str
    result: str
    message: str | None = None
    status_info: dict[str, Any] | None = None


@dataclass
class EntityApplied:
    applied: list[uuid.UUID] = field(default_factory=list)
    stale: list[uuid.UUID] = field(default_factory=list)
    moved: dict[uuid.UUID, tuple[str, str]] = field(default_factory=dict)


async def apply_entity_transitions(
    conn: AsyncConnection, table: EntityTable, transitions: Sequence[EntityTransition]
) -> EntityApplied:
    out = EntityApplied()
    if not transitions:
        return out
    model = table.model
    rows = await conn.execute(
        select(model.id, model.status, model.status_info)
        .where(among(model.id, {t.entity_id for t in transitions}))
        .order_by(model.id)
        .with_for_update(key_share=True)
    )
    current = {r.id: (str(r.status), dict(r.status_info or {})) for r in rows}
    now = dt.datetime.now(dt.UTC)
    updates: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    for t in transitions:
        state = current.get(t.entity_id)
        if state is None:
            continue
        status, info = state
        if status not in t.expected:
            out.stale.append(t.entity_id)
            continue
        target = t.to_status or status
        new_info = {**info, **(t.status_info or {})}
        if target != status or new_info != info:
            updates.append(
                {
                    "b_id": t.entity_id,
                    "b_status": target,
                    "b_info": new_info,
                    "b_changed": now if target != status else None,
                    "b_ended": now if target in table.terminal and status not in table.terminal else None,
                }
            )
        history.append(
            {
                table.history_fk: t.entity_id,
                "handler": t.handler,
                "result": t.result,
                "from_status": status,
                "to_status": target,
                "message": t.message,
                "created_at": now,
            }
        )
        out.applied.append(t.entity_id)
        if target != status:
            out.moved[t.entity_id] = (out.moved.get(t.entity_id, (status, target))[0], target)
        current[t.entity_id] = (target, new_info)
    if updates:
        ended = getattr(model, table.ended_column)
        await conn.execute(
            update(model)
            .where(model.id == bindparam("b_id"))
            .values(
                status=bindparam("b_status"),
                status_info=bindparam("b_info"),
                status_changed_at=func.coalesce(bindparam("b_changed"), model.status_changed_at),
                **{table.ended_column: func.coalesce(ended, bindparam("b_ended"))},
            )
            .execution_options(synchronize_session=False),
            updates,
        )
    await _record_history(conn, table, history)
    return out


_SAME = ("handler", "result", "from_status", "to_status")


async def _record_history(conn: AsyncConnection, table: EntityTable, rows: list[dict[str, Any]]) -> None:
    """Insert the rows that do not repeat their entity's latest history row."""
    if not rows:
        return
    hist = table.history
    fk = getattr(hist, table.history_fk)
    latest = await conn.execute(
        select(fk.label("entity_id"), *(getattr(hist, k) for k in _SAME))
        .where(among(fk, {r[table.history_fk] for r in rows}))
        .ext(distinct_on(fk))
        .order_by(fk, hist.id.desc())
    )
    last = {r.entity_id: tuple(getattr(r, k) for k in _SAME) for r in latest}
    fresh = []
    for row in rows:
        key = tuple(row[k] for k in _SAME)
        if last.get(row[table.history_fk]) != key:
            fresh.append(row)
            last[row[table.history_fk]] = key
    if fresh:
        await conn.execute(insert(hist), fresh)
