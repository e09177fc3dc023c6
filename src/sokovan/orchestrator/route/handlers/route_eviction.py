"""UNHEALTHY → TERMINATING: an unhealthy replica is evicted; the deployment replaces it."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.common.metrics import ROUTE_EVICTIONS
from sokovan.orchestrator.route.handler import R, RouteHandler, RouteTransitions
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import RouteRow


class RouteEviction(RouteHandler):
    targets = frozenset({R.UNHEALTHY})
    transitions = RouteTransitions(success=R.TERMINATING, failure=None)

    async def execute(self, rows: Sequence[RouteRow]) -> OutcomeResult:
        result = OutcomeResult(successes=[r.id for r in rows])
        ROUTE_EVICTIONS.inc(len(rows))
        return result
