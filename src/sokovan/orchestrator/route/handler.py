"""A route handler: its targets and its SUCCESS / FAILURE / STALE table at the top of its class.

The six handlers and their tables (the design's route table):

| Handler | From | SUCCESS | FAILURE | STALE |
|---|---|---|---|---|
| ProvisioningRoute | PROVISIONING | DEGRADED | FAILED_TO_START | - |
| HealthCheckRoute | HEALTHY, UNHEALTHY, DEGRADED | HEALTHY | UNHEALTHY | DEGRADED |
| RunningRoute | DEGRADED, HEALTHY, UNHEALTHY, FAILED_TO_START | (stay) | TERMINATING | - |
| RouteEviction | UNHEALTHY | TERMINATING | (stay) | - |
| TerminatingRoute | TERMINATING | TERMINATED | (stay) | - |
| ServiceDiscoverySync | HEALTHY | (stay) | (stay) | - |
"""

from __future__ import annotations

from sokovan.common.types import RouteStatus, SessionStatus
from sokovan.orchestrator.spine.outcome import OutcomeHandler, OutcomeTransitions
from sokovan.state.serving_reads import RouteRow

R = RouteStatus
RouteTransitions = OutcomeTransitions[RouteStatus]
# A replica session in one of these has ended or is ending: its route cannot be served.
ENDED_SESSION = SessionStatus.terminal() | {SessionStatus.TERMINATING}


class RouteHandler(OutcomeHandler[RouteRow, RouteStatus]):
    """Base of the route handlers."""
