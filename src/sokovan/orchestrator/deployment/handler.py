"""A deployment handler: its targets and its SUCCESS / FAILURE table at the top of its class.

The handlers and their tables (the design's deployment table, with DEGRADED and updates):

| Handler | From | SUCCESS | FAILURE |
|---|---|---|---|
| AutoscaleDeployment | READY, DEGRADED, SCALING, DEPLOYING | (stay) | (stay) |
| CheckPendingDeployment | PENDING | SCALING | (stay) |
| CheckReplicaDeployment | READY, DEGRADED | SCALING | (stay) |
| ReconcileDeployment | READY, DEGRADED | (stay) | SCALING |
| ScalingDeployment | SCALING | READY | DEGRADED |
| DeployingDeployment | DEPLOYING | READY | DEGRADED |
| DestroyingDeployment | DESTROYING | DESTROYED | DESTROYED |
| DeploymentHealth | READY, DEGRADED | READY | DEGRADED |

SUCCESS into READY means every target replica is HEALTHY; FAILURE into DEGRADED that fewer are.
"""

from __future__ import annotations

from sokovan.common.types import EndpointLifecycle
from sokovan.orchestrator.spine.outcome import OutcomeHandler, OutcomeTransitions
from sokovan.state.serving_reads import DeploymentRow

E = EndpointLifecycle
DeploymentTransitions = OutcomeTransitions[EndpointLifecycle]


class DeploymentHandler(OutcomeHandler[DeploymentRow, EndpointLifecycle]):
    """Base of the deployment handlers."""
