"""Read side of sessions for the API: one session, lists, kernels to fetch logs from (their
history: `history_read`).

Every query is filtered by what the caller may see (`visible`): a user its own sessions, an
admin all. A session the caller may not see reads exactly like one that does not exist.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from sqlalchemy import ColumnElement, Select, exists, func, or_, select, text
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased

from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Agent, Kernel, Session, SessionDependency, User
from sokovan.manager.repositories.paging import page_by_time
from sokovan.manager.repositories.retry_chains import retry_chains, retry_state
from sokovan.manager.repositories.session_inserts import MAIN_ROLE, SUB_ROLE, Inserted, NewSession
from sokovan.manager.repositories.tenancy import Principal


def visible(principal: Principal) -> ColumnElement[bool]:
    return principal.may_see(Session.user_id)


@dataclass(frozen=True)
class SessionFilter:
    statuses: Sequence[str] = ()
    types: Sequence[str] = ()
    owner: str | None = None
    access_key: str | None = None
    domain_name: str | None = None
    project_id: uuid.UUID | None = None


def _filtered(query: Select[Any], principal: Principal, flt: SessionFilter) -> Select[Any]:
    """`query` (which joins `User` on the session's owner) narrowed to what `principal` may see and
    `flt` asks for."""
    query = query.where(visible(principal))
    if flt.statuses:
        query = query.where(Session.status.in_(flt.statuses))
    if flt.types:
        query = query.where(Session.type.in_(flt.types))
    if flt.owner is not None:
        query = query.where(User.name == flt.owner)
    if flt.access_key is not None:
        query = query.where(Session.access_key == flt.access_key)
    if flt.domain_name is not None:
        query = query.where(Session.domain_name == flt.domain_name)
    if flt.project_id is not None:
        query = query.where(Session.project_id == flt.project_id)
    return query


# What an offset page may be ordered by (Backend.AI's names), besides its default, newest first.
ORDERABLE: dict[str, Any] = {
    "id": Session.id,
    "name": Session.name,
    "type": Session.type,
    "priority": Session.priority,
    "image": Session.image,
    "access_key": Session.access_key,
    "user_email": User.name,
    "domain_name": Session.domain_name,
    "scaling_group": Session.scaling_group,
    "cluster_mode": Session.cluster_mode,
    "cluster_size": Session.cluster_size,
    "status": Session.status,
    "status_changed": Session.status_changed_at,
    "result": Session.result,
    "created_at": Session.created_at,
    "terminated_at": Session.terminated_at,
}


# -- sessions ---------------------------------------------------------------------------------


def iso_utc(value: dt.datetime | None) -> str | None:
    """A time as the API writes it: UTC, ISO 8601, `Z`."""
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z") if value else None


def _correlated_json(expr: Any) -> Any:
    return expr.correlate(Session).scalar_subquery()


# Kernels, dependencies and "is part of a retry chain" come back with the session row itself, so
# a session read is one statement; only sessions in a chain need the chain queries.
_KERNELS_JSON = _correlated_json(
    select(
        func.coalesce(
            func.json_agg(
                aggregate_order_by(
                    func.json_build_object(
                        "id",
                        Kernel.id,
                        "status",
                        Kernel.status,
                        "agent_id",
                        Kernel.agent_id,
                        "exit_code",
                        Kernel.exit_code,
                        "cluster_role",
                        Kernel.cluster_role,
                        "service_addr",
                        Kernel.service_addr,
                        "image",
                        func.coalesce(Kernel.image_ref, Session.image),
                        "image_digest",
                        Kernel.image_digest,
                        "devices",
                        Kernel.devices,
                    ),
                    Kernel.cluster_idx,
                )
            ),
            text("'[]'::json"),
        )
    ).where(Kernel.session_id == Session.id)
).label("kernels_json")
_DEPS_JSON = _correlated_json(
    select(func.coalesce(func.json_agg(SessionDependency.depends_on), text("'[]'::json"))).where(
        SessionDependency.session_id == Session.id
    )
).label("deps_json")
_CHILD = aliased(Session)
_IN_CHAIN = or_(
    Session.parent_session_id.is_not(None),
    exists().where(_CHILD.parent_session_id == Session.id),
).label("in_chain")
_SESSION_QUERY: Select[Any] = select(
    *Session.__table__.c, User.name.label("owner"), _KERNELS_JSON, _DEPS_JSON, _IN_CHAIN
).join(User, User.id == Session.user_id)


def _session_query() -> Select[Any]:
    return _SESSION_QUERY


async def get_session(
    conn: AsyncConnection, session_id: uuid.UUID, principal: Principal
) -> dict[str, Any] | None:
    rows = (await conn.execute(_session_query().where(Session.id == session_id, visible(principal)))).all()
    views = await _views(conn, rows)
    return views[0] if views else None


async def list_sessions(
    conn: AsyncConnection, principal: Principal, flt: SessionFilter, limit: int, cursor: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """Newest first; `cursor` continues after the last item of the previous page."""
    query = _filtered(_session_query(), principal, flt)
    rows, next_cursor = await page_by_time(
        conn, query, Session.created_at, Session.id, limit, cursor, newest_first=True
    )
    return await _views(conn, rows), next_cursor


async def page_sessions(
    conn: AsyncConnection,
    principal: Principal,
    flt: SessionFilter,
    limit: int,
    offset: int,
    order: Sequence[tuple[str, bool]] = (),
) -> tuple[list[dict[str, Any]], int]:
    """One page by offset and how many sessions match in all (Backend.AI's GraphQL lists page so).
    `order`: (a name in `ORDERABLE`, descending) pairs; newest first when empty, the id last."""
    count = _filtered(
        select(func.count()).select_from(Session).join(User, User.id == Session.user_id), principal, flt
    )
    total = int((await conn.execute(count)).scalar_one())
    keys = [ORDERABLE[name].desc() if desc else ORDERABLE[name].asc() for name, desc in order]
    keys = keys or [Session.created_at.desc()]
    query = _filtered(_session_query(), principal, flt).order_by(*keys, Session.id.desc())
    rows = (await conn.execute(query.limit(limit).offset(offset))).all() if offset < total else []
    return await _views(conn, rows), total


async def sessions_by_ids(
    conn: AsyncConnection, ids: Sequence[uuid.UUID], principal: Principal
) -> list[dict[str, Any]]:
    """The sessions of `ids` that `principal` may see, in no particular order."""
    if not ids:
        return []
    rows = (await conn.execute(_session_query().where(Session.id.in_(ids), visible(principal)))).all()
    return await _views(conn, rows)


async def _views(conn: AsyncConnection, rows: Sequence[Any]) -> list[dict[str, Any]]:
    """Session JSON for each row, with kernels, dependencies and retry chains batched."""
    ids = [r.id for r in rows]
    if not ids:
        return []
    chained = [r.id for r in rows if r.in_chain]
    chains, children = await retry_chains(conn, chained) if chained else ({}, {})
    return [_view(s, chains, children) for s in rows]


def _view(s: Any, chains: dict[uuid.UUID, list[str]], children: dict[uuid.UUID, str]) -> dict[str, Any]:
    """One session's JSON from its row (`s`: the session's columns, `owner`, `kernels_json` and
    `deps_json`), with its retry chain and next attempt when it has them."""
    return {
        "id": str(s.id),
        "name": s.name,
        "owner": s.owner,
        "access_key": s.access_key,
        "status": s.status,
        "result": s.result,
        "status_info": s.status_info or {},
        "type": s.type,
        "image": s.image,
        "command": s.command,
        "resources": s.resources,
        "cluster_size": s.cluster_size,
        "cluster_mode": s.cluster_mode,
        "scaling_group": s.scaling_group,
        "priority": s.priority,
        "preemptible": s.preemptible,
        "max_duration": s.max_duration,
        "environ": s.environ or {},
        "depends_on": sorted(str(d) for d in s.deps_json),
        "kernels": [{**k, "id": str(k["id"])} for k in s.kernels_json],
        "created_at": iso_utc(s.created_at),
        "status_changed_at": iso_utc(s.status_changed_at),
        "terminated_at": iso_utc(s.terminated_at),
        "creation_id": s.creation_id,
        "parent_session_id": str(s.parent_session_id) if s.parent_session_id else None,
        "retry_count": s.retry_count,
        "max_retries": s.max_retries,
        "retry_policy": s.retry_policy,
        "retry_cause": s.retry_cause,
        "retry_state": retry_state(
            s.retry_count, s.max_retries, s.status_info, children.get(s.id) is not None
        ),
        "retry_child_id": children.get(s.id),
        "retry_chain": chains.get(s.id, [str(s.id)]),
    }


def created_view(session: NewSession, owner: str, inserted: Inserted) -> dict[str, Any]:
    """What `get_session` reads of a session the moment its create committed (PENDING, kernels
    unplaced, no retry chain yet), from the values written: a create answers without reading."""
    kernels = [
        {
            "id": kernel_id,
            "status": KernelStatus.PENDING.value,
            "agent_id": None,
            "exit_code": None,
            "cluster_role": MAIN_ROLE if idx == 0 else SUB_ROLE,
            "service_addr": None,
            "image": session.columns["image"],
            "image_digest": None,
            "devices": [],
        }
        for idx, kernel_id in enumerate(session.kernel_ids)
    ]
    row = SimpleNamespace(
        **session.columns,
        id=session.id,
        access_key=session.access_key,
        creation_id=session.creation_id,
        owner=owner,
        status=SessionStatus.PENDING.value,
        result=None,
        status_info={},
        deps_json=session.depends_on,
        kernels_json=kernels,
        created_at=inserted.created_at,
        status_changed_at=inserted.status_changed_at,
        terminated_at=None,
        parent_session_id=None,
        retry_count=0,
        retry_cause=None,
    )
    return _view(row, {}, {})


async def list_attempts(
    conn: AsyncConnection, session_id: uuid.UUID, principal: Principal
) -> list[dict[str, Any]] | None:
    """Every attempt of the session's retry chain, oldest first (the original, then each retry);
    None when the session does not exist or the caller may not see it."""
    if not await session_is_visible(conn, session_id, principal):
        return None
    chains, _ = await retry_chains(conn, [session_id])
    order = [uuid.UUID(i) for i in chains.get(session_id, [str(session_id)])]
    rows = await conn.execute(
        select(
            Session.id,
            Session.status,
            Session.result,
            Session.status_info,
            Session.retry_count,
            Session.retry_cause,
            Session.created_at,
            Session.terminated_at,
        ).where(Session.id.in_(order), visible(principal))
    )
    by_id = {r.id: r for r in rows}
    return [
        {
            "id": str(r.id),
            "status": r.status,
            "result": r.result,
            "cause": (r.status_info or {}).get("cause"),
            "retry_count": r.retry_count,
            "retry_cause": r.retry_cause,
            "created_at": iso_utc(r.created_at),
            "terminated_at": iso_utc(r.terminated_at),
        }
        for r in (by_id.get(i) for i in order)
        if r is not None
    ]


# -- kernels ---------------------------------------------------------------------------------


async def session_is_visible(conn: AsyncConnection, session_id: uuid.UUID, principal: Principal) -> bool:
    found = await conn.execute(select(Session.id).where(Session.id == session_id, visible(principal)))
    return found.first() is not None


async def kernels_for_logs(
    conn: AsyncConnection, session_id: uuid.UUID
) -> list[tuple[uuid.UUID, str | None, str | None]]:
    """(kernel id, agent id, agent rpc address) for each kernel of the session, in cluster order."""
    rows = await conn.execute(
        select(Kernel.id, Kernel.agent_id, Agent.rpc_addr)
        .outerjoin(Agent, Agent.id == Kernel.agent_id)
        .where(Kernel.session_id == session_id)
        .order_by(Kernel.cluster_idx)
    )
    return [(r.id, r.agent_id, r.rpc_addr) for r in rows]
