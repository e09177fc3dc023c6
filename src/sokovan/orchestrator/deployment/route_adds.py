"""Adding routes to deployments (PROVISIONING; the route coordinator creates their sessions).

Scaling and rolling out both add routes this way. The deployment's `replica_seq` is bumped in the
same guarded statement, so two managers can never both add the missing replicas: a deployment's
numbers are taken only if its `replica_seq` is still what was read and its status is still the
one the caller works on. Each route carries the revision it runs.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.bus.user_events import UserEvent, UserEventPublisher, publish
from sokovan.common.types import EndpointLifecycle, HandlerOutcome, RouteStatus
from sokovan.db.models import Route, RouteHistory
from sokovan.state.serving_reads import DeploymentRow

_CLAIM = text(
    "UPDATE deployments AS d SET replica_seq = v.seq + v.n"
    " FROM (SELECT unnest(CAST(:ids AS uuid[])) AS id, unnest(CAST(:seqs AS int[])) AS seq,"
    " unnest(CAST(:ns AS int[])) AS n, unnest(CAST(:revs AS int[])) AS rev) AS v"
    " WHERE d.id = v.id AND d.replica_seq = v.seq AND d.status = :status AND d.revision = v.rev"
    " RETURNING d.id"
)


async def add_routes(
    engine: AsyncEngine,
    events: UserEventPublisher | None,
    handler: str,
    missing: Sequence[tuple[DeploymentRow, int]],
    status: EndpointLifecycle,
) -> list[tuple[DeploymentRow, int]]:
    """Claim the replica numbers of every deployment in `missing` (only where nobody took any since
    it was read, and it is still in `status` at the revision read) and add their routes in
    PROVISIONING at the deployment's revision; returns those added."""
    if not missing:
        return []
    now = dt.datetime.now(dt.UTC)
    routes: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    created: list[tuple[DeploymentRow, uuid.UUID]] = []
    async with engine.begin() as conn:
        claimed = await _claim(conn, missing, status)
        added = [(d, n) for d, n in missing if d.id in claimed]
        for d, n in added:
            for i in range(n):
                rid, seq = uuid.uuid4(), d.replica_seq + i + 1
                routes.append(_route_row(rid, d, seq, now))
                history.append(
                    _history_row(rid, handler, f"replica {seq} of {d.name}, revision {d.revision}", now)
                )
                created.append((d, rid))
        if routes:
            await conn.execute(insert(Route), routes)
            await conn.execute(insert(RouteHistory), history)
    await publish(events, [_created_event(d, rid) for d, rid in created])
    return added


async def _claim(
    conn: AsyncConnection, missing: Sequence[tuple[DeploymentRow, int]], status: EndpointLifecycle
) -> set[uuid.UUID]:
    rows = await conn.execute(
        _CLAIM,
        {
            "ids": [d.id for d, _ in missing],
            "seqs": [d.replica_seq for d, _ in missing],
            "ns": [n for _, n in missing],
            "revs": [d.revision for d, _ in missing],
            "status": status.value,
        },
    )
    return {r[0] for r in rows}


def _route_row(rid: uuid.UUID, d: DeploymentRow, seq: int, now: dt.datetime) -> dict[str, Any]:
    return {
        "id": rid,
        "deployment_id": d.id,
        "status": RouteStatus.PROVISIONING.value,
        "status_info": {"replica": seq},
        "health": {},
        "revision": d.revision,
        "created_at": now,
        "status_changed_at": now,
    }


def _history_row(rid: uuid.UUID, handler: str, message: str, now: dt.datetime) -> dict[str, Any]:
    return {
        "route_id": rid,
        "handler": handler,
        "result": HandlerOutcome.SUCCESS.value,
        "from_status": None,
        "to_status": RouteStatus.PROVISIONING.value,
        "message": message,
        "created_at": now,
    }


def _created_event(d: DeploymentRow, route_id: uuid.UUID) -> UserEvent:
    return UserEvent(
        name="route.status",
        deployment_id=str(d.id),
        route_id=str(route_id),
        from_status=None,
        to_status=RouteStatus.PROVISIONING.value,
        owner=str(d.owner),
    )
