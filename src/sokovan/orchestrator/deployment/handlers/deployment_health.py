"""READY ⇄ DEGRADED: once a deployment's live routes match its target, READY means every target
replica is HEALTHY and DEGRADED that fewer are (zero included); status_info says how many.

A DEGRADED deployment whose count of HEALTHY replicas has not changed is left alone (no history
row per cycle); one whose count changed gets its status_info updated.
"""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.orchestrator.deployment.handler import DeploymentHandler, DeploymentTransitions, E
from sokovan.orchestrator.deployment.handlers.scaling_deployment import healthy, judge_health
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import DeploymentRow


class DeploymentHealth(DeploymentHandler):
    targets = frozenset({E.READY, E.DEGRADED})
    transitions = DeploymentTransitions(success=E.READY, failure=E.DEGRADED)

    async def execute(self, rows: Sequence[DeploymentRow]) -> OutcomeResult:
        result = OutcomeResult()
        for d in rows:
            if len(d.live_routes) != d.replicas or d.status_info.get("scaled_to") != d.replicas:
                continue  # ReconcileDeployment and CheckReplicaDeployment send it back to SCALING
            ready = healthy(d.live_routes)
            all_ready = ready >= d.replicas
            if d.status == E.READY and all_ready:
                continue
            if d.status == E.DEGRADED and not all_ready and d.status_info.get("healthy_replicas") == ready:
                continue
            judge_health(d, result, ready)
        return result
