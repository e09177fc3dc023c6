"""DeploymentCoordinator: the coordinator spine over deployments (SUCCESS / FAILURE outcomes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import Hint
from sokovan.bus.user_events import UserEventPublisher
from sokovan.orchestrator.deployment.handler import DeploymentHandler
from sokovan.orchestrator.deployment.kind import deployment_kind
from sokovan.orchestrator.locks import CycleLock
from sokovan.orchestrator.spine.outcome_coordinator import OutcomeCoordinator
from sokovan.state.serving_reads import DeploymentRow


class DeploymentCoordinator(OutcomeCoordinator[DeploymentHandler, DeploymentRow]):
    def __init__(
        self,
        engine: AsyncEngine,
        lanes: Mapping[str, Sequence[DeploymentHandler]],
        lock: CycleLock | None = None,
        events: UserEventPublisher | None = None,
    ) -> None:
        super().__init__(Hint.DEPLOYMENT, deployment_kind(), engine, lanes, lock, events)
