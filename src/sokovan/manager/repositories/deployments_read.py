"""Read side of deployments for the API: one deployment, lists, routes, and both histories.

Every query is filtered by what the caller may see (`visible`): a user its own deployments (and
their routes), an admin all. A deployment the caller may not see reads exactly like one that does
not exist. A deployment's `ready_replicas` (its HEALTHY routes) and, while one of its replica
sessions waits, that session's `pending_reason` come back with the row itself: one statement.
Statuses enter the SQL only as bound parameters from the enums.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, select
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import func

from sokovan.common.types import RouteStatus, SessionStatus
from sokovan.db.models import Deployment, DeploymentHistory, Route, RouteHistory, Session, User
from sokovan.manager.repositories.history_read import handler_run
from sokovan.manager.repositories.paging import page_after_key, page_by_time
from sokovan.manager.repositories.tenancy import Principal

Page = tuple[list[dict[str, Any]], str | None]


def visible(principal: Principal) -> ColumnElement[bool]:
    return principal.may_see(Deployment.user_id)


@dataclass(frozen=True)
class DeploymentFilter:
    statuses: Sequence[str] = ()
    owner: str | None = None


_READY = (
    select(func.count())
    .where(Route.deployment_id == Deployment.id, Route.status == RouteStatus.HEALTHY.value)
    .correlate(Deployment)
    .scalar_subquery()
    .label("ready_replicas")
)
# The first waiting replica's reason: "why is my replica not placed" on the deployment itself.
_REASON = Session.status_info.op("->>")("pending_reason")
_PENDING_REASON = (
    select(_REASON)
    .where(
        Session.deployment_id == Deployment.id,
        Session.status == SessionStatus.PENDING.value,
        _REASON.is_not(None),
    )
    .order_by(Session.created_at, Session.id)
    .limit(1)
    .correlate(Deployment)
    .scalar_subquery()
    .label("pending_reason")
)
_DEPLOYMENT_QUERY: Select[Any] = select(
    *Deployment.__table__.c, User.name.label("owner"), _READY, _PENDING_REASON
).join(User, User.id == Deployment.user_id)


def endpoint_of(proxy_url: str | None, name: str) -> str | None:
    """Where the app proxy serves a deployment: `<proxy url>/<name>`; None without a proxy."""
    return f"{proxy_url.rstrip('/')}/{name}" if proxy_url else None


def _view(row: Any, proxy_url: str | None) -> dict[str, Any]:
    info = dict(row.status_info or {})
    if row.pending_reason:
        info["pending_reason"] = row.pending_reason
    return {
        "id": row.id,
        "name": row.name,
        "type": row.type,
        "owner": row.owner,
        "status": row.status,
        "status_info": info,
        "replicas": row.replicas,
        "ready_replicas": row.ready_replicas,
        "definition": row.definition,
        "health_check": row.health_check,
        "endpoint": endpoint_of(proxy_url, row.name) if row.destroyed_at is None else None,
        "scaling_group": row.scaling_group,
        "created_at": row.created_at,
        "status_changed_at": row.status_changed_at,
        "destroyed_at": row.destroyed_at,
        "revision": row.revision,
        "rollout": rollout_view(row.rollout),
        "serving_revision": row.serving_revision,
        "autoscaling": row.autoscaling,
        "open_to_public": row.open_to_public,
        "backoff_until": row.backoff_until,
        "drain_timeout": row.drain_timeout,
    }


def rollout_view(rollout: dict[str, Any] | None) -> dict[str, Any] | None:
    """The update in progress as stored, with `rollback_at`: when it is rolled back by itself
    unless a replica of the new revision is HEALTHY (`started_at` + `rollback_after`)."""
    if not rollout:
        return None
    started = _stamp(rollout.get("started_at"))
    after = rollout.get("rollback_after")
    rollback_at = None
    if started is not None and isinstance(after, int | float) and not isinstance(after, bool):
        try:
            rollback_at = started + dt.timedelta(seconds=after)
        except OverflowError:
            rollback_at = None
    return {**rollout, "started_at": started, "rollback_at": rollback_at}


async def get_deployment(
    conn: AsyncConnection, deployment_id: uuid.UUID, principal: Principal, proxy_url: str | None = None
) -> dict[str, Any] | None:
    row = (
        await conn.execute(_DEPLOYMENT_QUERY.where(Deployment.id == deployment_id, visible(principal)))
    ).first()
    return _view(row, proxy_url) if row is not None else None


async def list_deployments(
    conn: AsyncConnection,
    principal: Principal,
    flt: DeploymentFilter,
    limit: int,
    cursor: str | None,
    proxy_url: str | None = None,
) -> Page:
    """Newest first; `cursor` continues after the last item of the previous page (ValueError for
    a cursor this module did not hand out)."""
    query = _DEPLOYMENT_QUERY.where(visible(principal))
    if flt.statuses:
        query = query.where(Deployment.status.in_(flt.statuses))
    if flt.owner is not None:
        query = query.where(User.name == flt.owner)
    rows, next_cursor = await page_by_time(
        conn, query, Deployment.created_at, Deployment.id, limit, cursor, newest_first=True
    )
    return [_view(r, proxy_url) for r in rows], next_cursor


async def deployment_is_visible(
    conn: AsyncConnection, deployment_id: uuid.UUID, principal: Principal
) -> bool:
    found = await conn.execute(
        select(Deployment.id).where(Deployment.id == deployment_id, visible(principal))
    )
    return found.first() is not None


async def route_is_visible(conn: AsyncConnection, route_id: uuid.UUID, principal: Principal) -> bool:
    found = await conn.execute(
        select(Route.id)
        .join(Deployment, Deployment.id == Route.deployment_id)
        .where(Route.id == route_id, visible(principal))
    )
    return found.first() is not None


# -- routes ------------------------------------------------------------------------------------


def _stamp(value: Any) -> dt.datetime | None:
    """A probe time as the proxy or the coordinator stored it (epoch seconds or ISO 8601)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            return dt.datetime.fromtimestamp(value, dt.UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str):
        try:
            stamp = dt.datetime.fromisoformat(value)
        except ValueError:
            return None
        return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=dt.UTC)
    return None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def route_health(raw: dict[str, Any] | None) -> dict[str, Any]:
    """The four health fields, filled in for a route never probed."""
    raw = raw or {}
    last_status = raw.get("last_status")
    return {
        "consecutive_successes": _count(raw.get("consecutive_successes")),
        "consecutive_failures": _count(raw.get("consecutive_failures")),
        "last_checked_at": _stamp(raw.get("last_checked_at")),
        "last_status": None if last_status is None else str(last_status),
    }


async def list_routes(
    conn: AsyncConnection, deployment_id: uuid.UUID, statuses: Sequence[str], limit: int, cursor: str | None
) -> Page:
    """Oldest first. The caller has already checked that the deployment is visible."""
    query = select(*Route.__table__.c).where(Route.deployment_id == deployment_id)
    if statuses:
        query = query.where(Route.status.in_(statuses))
    rows, next_cursor = await page_by_time(
        conn, query, Route.created_at, Route.id, limit, cursor, newest_first=False
    )
    items = [
        {
            "id": r.id,
            "session_id": r.session_id,
            "status": r.status,
            "status_info": r.status_info or {},
            "endpoint": r.endpoint,
            "health": route_health(r.health),
            "created_at": r.created_at,
            "status_changed_at": r.status_changed_at,
            "terminated_at": r.terminated_at,
            "revision": r.revision,
        }
        for r in rows
    ]
    return items, next_cursor


# -- histories ---------------------------------------------------------------------------------


async def _history(
    conn: AsyncConnection,
    table: type[DeploymentHistory] | type[RouteHistory],
    owner: ColumnElement[bool],
    limit: int,
    cursor: str | None,
) -> Page:
    rows, next_cursor = await page_after_key(
        conn, select(*table.__table__.c).where(owner), table.id, "id", int, limit, cursor
    )
    return [{**handler_run(h), "created_at": h.created_at} for h in rows], next_cursor


async def list_deployment_history(
    conn: AsyncConnection, deployment_id: uuid.UUID, limit: int, cursor: str | None
) -> Page:
    """Oldest first. The caller has already checked that the deployment is visible."""
    return await _history(
        conn, DeploymentHistory, DeploymentHistory.deployment_id == deployment_id, limit, cursor
    )


async def list_route_history(
    conn: AsyncConnection, route_id: uuid.UUID, limit: int, cursor: str | None
) -> Page:
    """Oldest first. The caller has already checked that the route is visible."""
    return await _history(conn, RouteHistory, RouteHistory.route_id == route_id, limit, cursor)
