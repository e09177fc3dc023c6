"""UNHEALTHY → TERMINATING: an unhealthy replica is evicted once it has stayed UNHEALTHY for its
health check's `eviction_grace` (3 intervals unless set); the deployment replaces it.

Meanwhile the route is out of the routing table (only HEALTHY routes are in it) and still probed:
a server that recovers — `healthy_threshold` passing probes — is HEALTHY again (HealthCheckRoute),
same route, same session, and nothing was replaced. Evictions count toward the deployment's
replacement backoff like failed starts (ScalingDeployment).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sokovan.bus.routing import HealthCheck
from sokovan.common.metrics import ROUTE_EVICTIONS
from sokovan.orchestrator.route.handler import R, RouteHandler, RouteTransitions
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import RouteRow


class RouteEviction(RouteHandler):
    targets = frozenset({R.UNHEALTHY})
    transitions = RouteTransitions(success=R.TERMINATING, failure=None)

    async def execute(self, rows: Sequence[RouteRow]) -> OutcomeResult:
        result = OutcomeResult()
        now = dt.datetime.now(dt.UTC)
        for route in rows:
            grace = HealthCheck.model_validate(route.health_check).grace()
            unhealthy_for = (now - route.status_changed_at).total_seconds()
            if unhealthy_for >= grace:
                result.successes.append(route.id)
                result.info[route.id] = {
                    "evicted": f"UNHEALTHY for {unhealthy_for:.0f} s (grace {grace:g} s)"
                }
            else:
                result.skipped[route.id] = f"UNHEALTHY for {unhealthy_for:.0f} s of a {grace:g} s grace"
        ROUTE_EVICTIONS.inc(len(result.successes))
        return result
