"""A deployment handler: its targets and its SUCCESS / FAILURE table at the top of its class.

The five handlers and their tables (the design's deployment table):

| Handler | From | SUCCESS | FAILURE |
|---|---|---|---|
| CheckPendingDeployment | PENDING | SCALING | (stay) |
| ScalingDeployment | SCALING | READY | (stay) |
| CheckReplicaDeployment | READY | SCALING | (stay) |
| ReconcileDeployment | READY | (stay) | SCALING |
| DestroyingDeployment | DESTROYING | DESTROYED | DESTROYED |
"""

from __future__ import annotations

from sokovan.common.types import EndpointLifecycle
from sokovan.orchestrator.spine.outcome import OutcomeHandler, OutcomeTransitions
from sokovan.state.serving_reads import DeploymentRow

E = EndpointLifecycle
DeploymentTransitions = OutcomeTransitions[EndpointLifecycle]


class DeploymentHandler(OutcomeHandler[DeploymentRow, EndpointLifecycle]):
    """Base of the deployment handlers."""
