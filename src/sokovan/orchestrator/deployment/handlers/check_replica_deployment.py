"""READY or DEGRADED → SCALING when the target number of replicas changed since the deployment last scaled."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.orchestrator.deployment.handler import DeploymentHandler, DeploymentTransitions, E
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import DeploymentRow


class CheckReplicaDeployment(DeploymentHandler):
    targets = frozenset({E.READY, E.DEGRADED})
    transitions = DeploymentTransitions(success=E.SCALING, failure=None)

    async def execute(self, rows: Sequence[DeploymentRow]) -> OutcomeResult:
        result = OutcomeResult()
        for d in rows:
            if d.status_info.get("scaled_to") != d.replicas:
                result.successes.append(d.id)
                result.info[d.id] = {"scaling_reason": f"target changed to {d.replicas}"}
        return result
