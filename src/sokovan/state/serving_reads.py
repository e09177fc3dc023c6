"""The read model of deployments and routes, as the deployment and route coordinators see them.

One statement per kind of row per cycle: deployments in some statuses with their routes, or
routes in some statuses with what they need of their deployment, their replica session and its
main kernel (where its server answers).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import String, and_, cast, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.types import EndpointLifecycle, RouteStatus, SessionStatus
from sokovan.db.models import Deployment, DeploymentRevision, Kernel, Route, Session

BATCH_LIMIT = 5000


@dataclass(frozen=True)
class RouteRow:
    id: uuid.UUID
    deployment_id: uuid.UUID
    deployment_name: str
    owner: uuid.UUID  # the deployment owner's user id
    access_key: str
    status: RouteStatus
    status_info: dict[str, Any]
    status_changed_at: dt.datetime
    created_at: dt.datetime
    session_id: uuid.UUID | None  # its replica session, linked or found by its creation key
    session_status: SessionStatus | None
    session_changed_at: dt.datetime | None  # when the replica session entered its status
    service_addr: str | None
    endpoint: str | None
    health: dict[str, Any]
    health_check: dict[str, Any]
    definition: dict[str, Any]
    scaling_group: str
    revision: int = 1
    drain_timeout: float = 30.0

    def running_since(self) -> float:
        """When the replica session became RUNNING (epoch seconds): `initial_delay` counts from
        there, not from the route's creation (a replica may wait a long time for room first)."""
        if self.session_status == SessionStatus.RUNNING and self.session_changed_at is not None:
            return self.session_changed_at.timestamp()
        return self.status_changed_at.timestamp()


@dataclass(frozen=True)
class DeploymentRow:
    id: uuid.UUID
    name: str
    type: str
    access_key: str
    owner: uuid.UUID
    scaling_group: str
    replicas: int
    definition: dict[str, Any]
    health_check: dict[str, Any]
    replica_seq: int
    status: EndpointLifecycle
    status_info: dict[str, Any]
    status_changed_at: dt.datetime
    created_at: dt.datetime
    routes: tuple[RouteRow, ...]  # every route not TERMINATED, oldest first
    revision: int = 1
    rollout: dict[str, Any] | None = None
    serving_revision: int | None = None
    autoscaling: dict[str, Any] | None = None
    backoff_until: dt.datetime | None = None
    drain_timeout: float = 30.0
    token_sha256: str | None = None
    open_to_public: bool = False

    @property
    def live_routes(self) -> list[RouteRow]:
        """Routes that count as replicas (not being given up)."""
        return [r for r in self.routes if r.status in RouteStatus.live()]


def replica_creation_id(route_id: uuid.UUID) -> str:
    """The creation key of a route's replica session: one session per route, whoever creates it."""
    return f"route:{route_id}"


def _created_by(route_id: Any, access_key: Any) -> Any:
    """The replica session a route created, also before the route was linked to it (a manager may
    stop between the two, or the route may be taken out of service meanwhile)."""
    return and_(
        Route.session_id.is_(None),
        Session.access_key == access_key,
        Session.creation_id == func.concat("route:", cast(route_id, String)),
    )


def _route_query() -> Any:
    return (
        select(
            *Route.__table__.c,
            Deployment.name.label("deployment_name"),
            Deployment.user_id.label("owner"),
            Deployment.access_key,
            # The route's own revision: an update moves the deployment on, not its old replicas.
            func.coalesce(DeploymentRevision.health_check, Deployment.health_check).label("health_check"),
            func.coalesce(DeploymentRevision.definition, Deployment.definition).label("definition"),
            Deployment.scaling_group,
            Deployment.drain_timeout,
            Session.id.label("replica_session_id"),
            Session.status.label("session_status"),
            Session.status_changed_at.label("session_changed_at"),
            Kernel.service_addr,
        )
        .join(Deployment, Deployment.id == Route.deployment_id)
        .outerjoin(
            DeploymentRevision,
            and_(
                DeploymentRevision.deployment_id == Route.deployment_id,
                DeploymentRevision.revision == Route.revision,
            ),
        )
        .outerjoin(Session, or_(Session.id == Route.session_id, _created_by(Route.id, Deployment.access_key)))
        .outerjoin(Kernel, and_(Kernel.session_id == Session.id, Kernel.cluster_idx == 0))
    )


def _route(r: Any) -> RouteRow:
    route = r
    return RouteRow(
        id=route.id,
        deployment_id=route.deployment_id,
        deployment_name=r.deployment_name,
        owner=r.owner,
        access_key=r.access_key,
        status=RouteStatus(route.status),
        status_info=dict(route.status_info or {}),
        status_changed_at=route.status_changed_at,
        created_at=route.created_at,
        session_id=route.replica_session_id,
        session_status=SessionStatus(r.session_status) if r.session_status else None,
        session_changed_at=r.session_changed_at,
        service_addr=r.service_addr,
        endpoint=route.endpoint,
        health=dict(route.health or {}),
        health_check=dict(r.health_check or {}),
        definition=dict(r.definition or {}),
        scaling_group=r.scaling_group,
        revision=route.revision,
        drain_timeout=float(r.drain_timeout),
    )


async def fetch_routes(
    conn: AsyncConnection, statuses: frozenset[RouteStatus], limit: int = BATCH_LIMIT
) -> list[RouteRow]:
    rows = await conn.execute(
        _route_query()
        .where(Route.status.in_([s.value for s in statuses]))
        .order_by(Route.created_at, Route.id)
        .limit(limit)
    )
    return [_route(r) for r in rows]


async def fetch_deployments(
    conn: AsyncConnection, statuses: frozenset[EndpointLifecycle], limit: int = BATCH_LIMIT
) -> list[DeploymentRow]:
    deployments = (
        await conn.execute(
            select(*Deployment.__table__.c)
            .where(Deployment.status.in_([s.value for s in statuses]))
            .order_by(Deployment.created_at, Deployment.id)
            .limit(limit)
        )
    ).all()
    if not deployments:
        return []
    routes: dict[uuid.UUID, list[RouteRow]] = defaultdict(list)
    rows = await conn.execute(
        _route_query()
        .where(
            Route.deployment_id.in_([d.id for d in deployments]),
            Route.status != RouteStatus.TERMINATED.value,
        )
        .order_by(Route.created_at, Route.id)
    )
    for r in rows:
        routes[r.deployment_id].append(_route(r))
    return [_deployment(d, routes.get(d.id, [])) for d in deployments]


def _deployment(d: Any, routes: Sequence[RouteRow]) -> DeploymentRow:
    return DeploymentRow(
        id=d.id,
        name=d.name,
        type=d.type,
        access_key=d.access_key,
        owner=d.user_id,
        scaling_group=d.scaling_group,
        replicas=d.replicas,
        definition=dict(d.definition),
        health_check=dict(d.health_check),
        replica_seq=d.replica_seq,
        status=EndpointLifecycle(d.status),
        status_info=dict(d.status_info or {}),
        status_changed_at=d.status_changed_at,
        created_at=d.created_at,
        routes=tuple(routes),
        revision=d.revision,
        rollout=dict(d.rollout) if d.rollout is not None else None,
        serving_revision=d.serving_revision,
        autoscaling=dict(d.autoscaling) if d.autoscaling is not None else None,
        backoff_until=d.backoff_until,
        drain_timeout=float(d.drain_timeout),
        token_sha256=d.token_sha256,
        open_to_public=bool(d.open_to_public),
    )
