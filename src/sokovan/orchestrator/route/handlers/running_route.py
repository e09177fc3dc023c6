"""A serving route whose replica session has ended (or went away), or one that failed to start,
goes TERMINATING; the deployment replaces it (ReconcileDeployment)."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.orchestrator.route.handler import ENDED_SESSION, R, RouteHandler, RouteTransitions
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import RouteRow


class RunningRoute(RouteHandler):
    targets = frozenset({R.DEGRADED, R.HEALTHY, R.UNHEALTHY, R.FAILED_TO_START})
    transitions = RouteTransitions(success=None, failure=R.TERMINATING)

    async def execute(self, rows: Sequence[RouteRow]) -> OutcomeResult:
        result = OutcomeResult()
        for route in rows:
            if route.status == R.FAILED_TO_START:
                result.failures[route.id] = "failed to start"
            elif route.session_status is None or route.session_status in ENDED_SESSION:
                result.failures[route.id] = f"replica session {route.session_status or 'gone'}"
            else:
                result.successes.append(route.id)
        return result
