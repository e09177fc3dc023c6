"""SCALING → READY: make the live routes match the target, then say so.

Too few: new routes are added in PROVISIONING (the route coordinator creates each one's session,
with the route as its creation key). The deployment's `replica_seq` is bumped in the same guarded
statement, so two managers can never both add the missing replicas. Too many: routes are taken
out of service — unhealthy ones first, then the newest.

Replacement is rate limited so a broken definition does not spin: after `BURST` replicas failed to
start within `WINDOW` seconds, no replica is added until `backoff(failures)` seconds have passed
since the latest failure (10 s, doubling, at most 5 minutes); the deployment says why meanwhile.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.bus.user_events import UserEvent, UserEventPublisher, publish
from sokovan.common.metrics import REPLICA_REPLACEMENTS
from sokovan.common.types import HandlerOutcome, RouteStatus
from sokovan.db.models import Route, RouteHistory
from sokovan.orchestrator.deployment.handler import DeploymentHandler, DeploymentTransitions, E
from sokovan.orchestrator.route.kind import take_out_of_service
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import DeploymentRow, RouteRow

BURST = 3
WINDOW = 300.0
# Which live routes go first when scaling down (lower first); ties: the newest first.
_REMOVAL_ORDER = {
    RouteStatus.UNHEALTHY: 0,
    RouteStatus.DEGRADED: 1,
    RouteStatus.PROVISIONING: 2,
    RouteStatus.HEALTHY: 3,
}


def backoff(failures: int) -> float:
    """Seconds to wait after the latest failed start, given the failures within the window."""
    if failures < BURST:
        return 0.0
    return float(min(10 * 2 ** (failures - BURST), 300))


def removal_order(routes: Sequence[RouteRow]) -> list[RouteRow]:
    return sorted(routes, key=lambda r: (_REMOVAL_ORDER.get(r.status, 0), -r.created_at.timestamp()))


class ScalingDeployment(DeploymentHandler):
    targets = frozenset({E.SCALING})
    transitions = DeploymentTransitions(success=E.READY, failure=None)

    def __init__(self, engine: AsyncEngine, events: UserEventPublisher | None = None) -> None:
        self._engine = engine
        self._events = events

    async def execute(self, rows: Sequence[DeploymentRow]) -> OutcomeResult:
        """Decide every deployment first, then write: one transaction takes the surplus routes out
        of service, one claims replica numbers and adds the missing routes, whatever the count."""
        result = OutcomeResult()
        now = dt.datetime.now(dt.UTC)
        short = [d for d in rows if len(d.live_routes) < d.replicas]
        failed = await self._failed_starts(short, now)
        surplus: list[tuple[RouteRow, str]] = []
        missing: list[tuple[DeploymentRow, int]] = []
        for d in rows:
            live = d.live_routes
            if len(live) > d.replicas:
                why = f"scaled down to {d.replicas}"
                surplus += [(r, why) for r in removal_order(live)[: len(live) - d.replicas]]
            elif len(live) < d.replicas:
                count, latest = failed.get(d.id, (0, None))
                wait = backoff(count)
                if latest is not None and wait > 0 and (now - latest).total_seconds() < wait:
                    until = latest + dt.timedelta(seconds=wait)
                    message = (
                        f"{count} replicas failed to start in the last {WINDOW:.0f} s;"
                        f" next replica after {until.isoformat(timespec='seconds')}"
                    )
                    result.failures[d.id] = message
                    result.info[d.id] = {"backoff_until": until.isoformat()}
                    continue
                missing.append((d, d.replicas - len(live)))
                continue
            result.successes.append(d.id)
        await take_out_of_service(self._engine, self._events, surplus, self.name)
        for d, added in await self._add_routes(missing):
            if d.status_info.get("scaled_to") == d.replicas:
                REPLICA_REPLACEMENTS.inc(added)
            result.successes.append(d.id)
        # Deployments another manager scaled meanwhile are left for the next cycle.
        targets = {d.id: d.replicas for d in rows}
        for sid in result.successes:
            result.info[sid] = {"scaled_to": targets[sid], "backoff_until": None}
        return result

    async def _failed_starts(
        self, rows: Sequence[DeploymentRow], now: dt.datetime
    ) -> dict[uuid.UUID, tuple[int, dt.datetime | None]]:
        """Per deployment: routes that failed to start within the window, and when the latest did."""
        if not rows:
            return {}
        async with self._engine.connect() as conn:
            found = await conn.execute(
                select(Route.deployment_id, func.count(), func.max(RouteHistory.created_at))
                .join(RouteHistory, RouteHistory.route_id == Route.id)
                .where(
                    Route.deployment_id.in_([d.id for d in rows]),
                    RouteHistory.to_status == RouteStatus.FAILED_TO_START.value,
                    RouteHistory.from_status != RouteStatus.FAILED_TO_START.value,
                    RouteHistory.created_at > now - dt.timedelta(seconds=WINDOW),
                )
                .group_by(Route.deployment_id)
            )
            return {r[0]: (int(r[1]), r[2]) for r in found}

    async def _add_routes(
        self, missing: Sequence[tuple[DeploymentRow, int]]
    ) -> list[tuple[DeploymentRow, int]]:
        """Claim the replica numbers of every deployment in `missing` (only where nobody took any
        since it was read) and add their routes in PROVISIONING; returns those added."""
        if not missing:
            return []
        now = dt.datetime.now(dt.UTC)
        routes: list[dict[str, Any]] = []
        history: list[dict[str, Any]] = []
        created: list[tuple[DeploymentRow, uuid.UUID]] = []
        async with self._engine.begin() as conn:
            claimed = await _claim(conn, missing)
            added = [(d, n) for d, n in missing if d.id in claimed]
            for d, n in added:
                for i in range(n):
                    rid, seq = uuid.uuid4(), d.replica_seq + i + 1
                    routes.append(_route_row(rid, d, seq, now))
                    history.append(_history_row(rid, self.name, f"replica {seq} of {d.name}", now))
                    created.append((d, rid))
            if routes:
                await conn.execute(insert(Route), routes)
                await conn.execute(insert(RouteHistory), history)
        await publish(self._events, [_created_event(d, rid) for d, rid in created])
        return added


# Set-based and guarded: a deployment's numbers are taken only if its replica_seq is still what was
# read and it is still SCALING; RETURNING names those this run claimed.
_CLAIM = text(
    "UPDATE deployments AS d SET replica_seq = v.seq + v.n"
    " FROM (SELECT unnest(CAST(:ids AS uuid[])) AS id, unnest(CAST(:seqs AS int[])) AS seq,"
    " unnest(CAST(:ns AS int[])) AS n) AS v"
    " WHERE d.id = v.id AND d.replica_seq = v.seq AND d.status = :scaling"
    " RETURNING d.id"
)


async def _claim(conn: AsyncConnection, missing: Sequence[tuple[DeploymentRow, int]]) -> set[uuid.UUID]:
    rows = await conn.execute(
        _CLAIM,
        {
            "ids": [d.id for d, _ in missing],
            "seqs": [d.replica_seq for d, _ in missing],
            "ns": [n for _, n in missing],
            "scaling": E.SCALING.value,
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
        to_status=RouteStatus.PROVISIONING.value,
        owner=str(d.owner),
    )
