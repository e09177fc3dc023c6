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

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.bus.user_events import UserEvent, UserEventPublisher, publish
from sokovan.common.metrics import REPLICA_REPLACEMENTS
from sokovan.common.types import HandlerOutcome, RouteStatus
from sokovan.db.models import Deployment, Route, RouteHistory
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
        result = OutcomeResult()
        now = dt.datetime.now(dt.UTC)
        short = [d for d in rows if len(d.live_routes) < d.replicas]
        failed = await self._failed_starts(short, now)
        for d in rows:
            live = d.live_routes
            if len(live) > d.replicas:
                victims = removal_order(live)[: len(live) - d.replicas]
                await take_out_of_service(
                    self._engine, self._events, victims, self.name, f"scaled down to {d.replicas}"
                )
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
                added = await self._add_routes(d, d.replicas - len(live))
                if added is None:
                    continue  # another manager scaled it meanwhile: look again next cycle
                if d.status_info.get("scaled_to") == d.replicas:
                    REPLICA_REPLACEMENTS.inc(added)
            result.successes.append(d.id)
            result.info[d.id] = {"scaled_to": d.replicas, "backoff_until": None}
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

    async def _add_routes(self, d: DeploymentRow, count: int) -> int | None:
        now = dt.datetime.now(dt.UTC)
        ids = [uuid.uuid4() for _ in range(count)]
        async with self._engine.begin() as conn:
            if not await _claim(conn, d, count):
                return None
            await conn.execute(
                insert(Route),
                [
                    {
                        "id": rid,
                        "deployment_id": d.id,
                        "status": RouteStatus.PROVISIONING.value,
                        "status_info": {"replica": d.replica_seq + i + 1},
                        "health": {},
                        "created_at": now,
                        "status_changed_at": now,
                    }
                    for i, rid in enumerate(ids)
                ],
            )
            await conn.execute(
                insert(RouteHistory),
                [
                    {
                        "route_id": rid,
                        "handler": self.name,
                        "result": HandlerOutcome.SUCCESS.value,
                        "from_status": None,
                        "to_status": RouteStatus.PROVISIONING.value,
                        "message": f"replica {d.replica_seq + i + 1} of {d.name}",
                        "created_at": now,
                    }
                    for i, rid in enumerate(ids)
                ],
            )
        await publish(self._events, [_created_event(d, rid) for rid in ids])
        return count


async def _claim(conn: AsyncConnection, d: DeploymentRow, count: int) -> bool:
    """Take `count` replica numbers, only if nobody took any since `d` was read."""
    claimed = await conn.execute(
        update(Deployment)
        .where(
            Deployment.id == d.id,
            Deployment.replica_seq == d.replica_seq,
            Deployment.status == E.SCALING.value,
        )
        .values(replica_seq=d.replica_seq + count)
        .returning(Deployment.id)
    )
    return claimed.first() is not None


def _created_event(d: DeploymentRow, route_id: uuid.UUID) -> UserEvent:
    return UserEvent(
        name="route.status",
        deployment_id=str(d.id),
        route_id=str(route_id),
        to_status=RouteStatus.PROVISIONING.value,
        owner=str(d.owner),
    )
