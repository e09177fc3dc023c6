"""Deployments as an entity of the coordinator spine: their table, reads and events."""

from __future__ import annotations

from sokovan.bus.user_events import UserEvent
from sokovan.common.metrics import DEPLOYMENT_TRANSITIONS
from sokovan.common.types import EndpointLifecycle
from sokovan.db.models import Deployment, DeploymentHistory
from sokovan.orchestrator.spine.outcome import OutcomeKind
from sokovan.state.entity_writes import EntityTable
from sokovan.state.serving_reads import DeploymentRow, fetch_deployments

DEPLOYMENTS = EntityTable(
    model=Deployment,
    history=DeploymentHistory,
    history_fk="deployment_id",
    ended_column="destroyed_at",
    terminal=frozenset({EndpointLifecycle.DESTROYED.value}),
)


def deployment_event(row: DeploymentRow, src: str, dst: str) -> UserEvent:
    return UserEvent(
        name="deployment.status",
        deployment_id=str(row.id),
        from_status=src,
        to_status=dst,
        owner=str(row.owner),
        detail={"name": row.name},
    )


def deployment_kind() -> OutcomeKind[DeploymentRow, EndpointLifecycle]:
    return OutcomeKind("deployment", DEPLOYMENTS, fetch_deployments, deployment_event, DEPLOYMENT_TRANSITIONS)
