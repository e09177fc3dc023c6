"""SCALING → READY or DEGRADED: make the live routes match the target, then say how healthy it is.

Too few: new routes are added in PROVISIONING (`route_adds`; the route coordinator creates each
one's session, with the route as its creation key), as many as the replacement backoff allows
(`replacement_backoff`: failed starts and evictions share it). Too many: routes are taken out of
service — unhealthy ones first, then the newest — and drained. Once the live routes match the
target the deployment is READY when every target replica is HEALTHY, else DEGRADED (a FAILURE
outcome, whose message says how many are); DeploymentHealth moves it between the two after that.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.user_events import UserEventPublisher
from sokovan.common.metrics import REPLICA_REPLACEMENTS
from sokovan.common.types import RouteStatus
from sokovan.orchestrator.deployment import replacement_backoff
from sokovan.orchestrator.deployment.handler import DeploymentHandler, DeploymentTransitions, E
from sokovan.orchestrator.deployment.route_adds import add_routes
from sokovan.orchestrator.route.kind import take_out_of_service
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import DeploymentRow, RouteRow

# Which live routes go first when scaling down (lower first); ties: the newest first.
_REMOVAL_ORDER = {
    RouteStatus.UNHEALTHY: 0,
    RouteStatus.DEGRADED: 1,
    RouteStatus.PROVISIONING: 2,
    RouteStatus.HEALTHY: 3,
}


def removal_order(routes: Sequence[RouteRow]) -> list[RouteRow]:
    return sorted(routes, key=lambda r: (_REMOVAL_ORDER.get(r.status, 0), -r.created_at.timestamp()))


def healthy(routes: Sequence[RouteRow]) -> int:
    return sum(1 for r in routes if r.status == RouteStatus.HEALTHY)


def judge_health(d: DeploymentRow, result: OutcomeResult, ready: int) -> None:
    """READY (a success) when every target replica is HEALTHY (`ready` of them are), else
    DEGRADED (a failure saying how many are); the counts go to status_info either way."""
    result.info[d.id] = {**result.info.get(d.id, {}), "healthy_replicas": ready, "replicas": d.replicas}
    if ready >= d.replicas:
        result.successes.append(d.id)
    else:
        result.failures[d.id] = f"{ready} of {d.replicas} replicas HEALTHY"


class ScalingDeployment(DeploymentHandler):
    targets = frozenset({E.SCALING})
    transitions = DeploymentTransitions(success=E.READY, failure=E.DEGRADED)

    def __init__(self, engine: AsyncEngine, events: UserEventPublisher | None = None) -> None:
        self._engine = engine
        self._events = events

    async def execute(self, rows: Sequence[DeploymentRow]) -> OutcomeResult:
        """Decide every deployment first, then write: one transaction takes the surplus routes out
        of service, one claims replica numbers and adds the missing routes, whatever the count."""
        result = OutcomeResult()
        now = dt.datetime.now(dt.UTC)
        short = [d for d in rows if len(d.live_routes) < d.replicas]
        allowed = await replacement_backoff.replacements(self._engine, short, now)
        surplus: list[tuple[RouteRow, str]] = []
        missing: list[tuple[DeploymentRow, int]] = []
        matched: list[tuple[DeploymentRow, int]] = []  # with how many HEALTHY replicas it keeps
        for d in rows:
            live = d.live_routes
            if len(live) > d.replicas:
                why = f"scaled down to {d.replicas}"
                order = removal_order(live)
                surplus += [(r, why) for r in order[: len(live) - d.replicas]]
                matched.append((d, healthy(order[len(live) - d.replicas :])))
            elif len(live) < d.replicas:
                may = allowed[d.id]
                need = d.replicas - len(live)
                count = need if may.allowed is None else min(need, may.allowed)
                if count <= 0:
                    result.skipped[d.id] = may.why or "waiting to add replicas"
                    result.info[d.id] = {"backoff_until": may.until.isoformat() if may.until else None}
                    continue
                missing.append((d, count))
            else:
                matched.append((d, healthy(live)))
        await replacement_backoff.record(self._engine, short, {d.id: allowed[d.id].until for d in short})
        await take_out_of_service(self._engine, self._events, surplus, self.name)
        for d, added in await add_routes(self._engine, self._events, self.name, missing, E.SCALING):
            if d.status_info.get("scaled_to") == d.replicas:
                REPLICA_REPLACEMENTS.inc(added)
            if len(d.live_routes) + added >= d.replicas:
                matched.append((d, healthy(d.live_routes)))
            else:
                result.skipped[d.id] = f"added {added} replica(s); more after the backoff"
        # Deployments another manager scaled meanwhile are left for the next cycle.
        for d, ready in matched:
            result.info[d.id] = {"scaled_to": d.replicas, "backoff_until": None}
            judge_health(d, result, ready)
        return result
