"""PROVISIONING → DEGRADED once its replica session runs and says where its server answers;
→ FAILED_TO_START when the session ends (or is refused) before that.

A replica counts as started once its session has stayed RUNNING for `STARTUP_GRACE` seconds (like
Kubernetes' minReadySeconds): a command that exits at once is a failed start, whichever cycle
happened to see it running for a moment.

The route is the replica's creation key: the session is created here, idempotently (a second
manager, or this one after a crash, finds the same session), and linked to the route. The route
reads find the session by that key before it is linked, so a route taken out of service meanwhile
still ends it (TerminatingRoute runs in this handler's lane, never while a creation is in flight).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence

from sqlalchemy import bindparam, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import SessionStatus
from sokovan.db.models import Route
from sokovan.orchestrator.deployment.replicas import ReplicaRefused, ReplicaSessions, replica_spec
from sokovan.orchestrator.route.handler import ENDED_SESSION, R, RouteHandler, RouteTransitions
from sokovan.orchestrator.spine.concurrency import bounded_gather
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import RouteRow

STARTUP_GRACE = 1.0


class ProvisioningRoute(RouteHandler):
    targets = frozenset({R.PROVISIONING})
    transitions = RouteTransitions(success=R.DEGRADED, failure=R.FAILED_TO_START)

    def __init__(self, engine: AsyncEngine, replicas: ReplicaSessions) -> None:
        self._engine = engine
        self._replicas = replicas

    async def execute(self, rows: Sequence[RouteRow]) -> OutcomeResult:
        result = OutcomeResult()
        links: list[dict[str, object]] = []
        unborn = [r for r in rows if r.session_id is None]
        created = await bounded_gather([self._create(r) for r in unborn])
        for route, outcome in zip(unborn, created, strict=True):
            if isinstance(outcome, ReplicaRefused):
                result.failures[route.id] = f"replica refused: {outcome}"
            else:
                links.append({"b_id": route.id, "b_session": outcome, "b_endpoint": None})
                result.skipped[route.id] = "replica session created"
        for route in rows:
            if route.session_id is None:
                continue
            if route.session_status in ENDED_SESSION:
                result.failures[route.id] = f"replica session {route.session_status} before it served"
            elif route.session_status == SessionStatus.RUNNING and route.service_addr and _settled(route):
                links.append(
                    {"b_id": route.id, "b_session": route.session_id, "b_endpoint": route.service_addr}
                )
                result.successes.append(route.id)
                result.info[route.id] = {"endpoint": route.service_addr}
            else:
                result.skipped[route.id] = f"replica session {route.session_status}"
        if links:
            async with self._engine.begin() as conn:
                await conn.execute(
                    update(Route)
                    .where(Route.id == bindparam("b_id"))
                    .values(session_id=bindparam("b_session"), endpoint=bindparam("b_endpoint"))
                    .execution_options(synchronize_session=False),
                    links,
                )
        return result

    async def _create(self, route: RouteRow) -> uuid.UUID | ReplicaRefused:
        spec = replica_spec(
            route.access_key,
            route.deployment_id,
            route.deployment_name,
            route.id,
            route.definition,
            route.scaling_group,
        )
        try:
            return await self._replicas.ensure(spec)
        except ReplicaRefused as exc:
            return exc


def _settled(route: RouteRow) -> bool:
    changed = route.session_changed_at
    return changed is not None and (dt.datetime.now(dt.UTC) - changed).total_seconds() >= STARTUP_GRACE
