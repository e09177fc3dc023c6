"""RouteCoordinator: the coordinator spine over routes (SUCCESS / FAILURE / STALE outcomes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import Hint
from sokovan.bus.user_events import UserEventPublisher
from sokovan.orchestrator.locks import CycleLock
from sokovan.orchestrator.route.handler import RouteHandler
from sokovan.orchestrator.route.kind import route_kind
from sokovan.orchestrator.spine.outcome_coordinator import OutcomeCoordinator
from sokovan.state.serving_reads import RouteRow


class RouteCoordinator(OutcomeCoordinator[RouteHandler, RouteRow]):
    def __init__(
        self,
        engine: AsyncEngine,
        lanes: Mapping[str, Sequence[RouteHandler]],
        lock: CycleLock | None = None,
        events: UserEventPublisher | None = None,
    ) -> None:
        super().__init__(Hint.ROUTE, route_kind(), engine, lanes, lock, events)
