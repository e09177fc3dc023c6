"""READY or DEGRADED stays so while its live routes match what it scaled to; a route that went away (evicted,
failed, its session lost) fails the check and sends the deployment back to SCALING to replace it."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.orchestrator.deployment.handler import DeploymentHandler, DeploymentTransitions, E
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import DeploymentRow


class ReconcileDeployment(DeploymentHandler):
    targets = frozenset({E.READY, E.DEGRADED})
    transitions = DeploymentTransitions(success=None, failure=E.SCALING)

    async def execute(self, rows: Sequence[DeploymentRow]) -> OutcomeResult:
        result = OutcomeResult()
        for d in rows:
            live = len(d.live_routes)
            if live != d.replicas:
                result.failures[d.id] = f"{live} live replicas of {d.replicas}"
                result.info[d.id] = {"scaling_reason": f"{live} live replicas of {d.replicas}"}
            else:
                result.successes.append(d.id)
        return result
