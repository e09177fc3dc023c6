"""DESTROYING → DESTROYED: take every route out of service, and end once all are TERMINATED.

The route coordinator ends each route's replica session; meanwhile the deployment waits here. Its
name is free again once it is DESTROYED.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.user_events import UserEventPublisher
from sokovan.common.types import RouteStatus
from sokovan.orchestrator.deployment.handler import DeploymentHandler, DeploymentTransitions, E
from sokovan.orchestrator.route.kind import take_out_of_service
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import DeploymentRow


class DestroyingDeployment(DeploymentHandler):
    targets = frozenset({E.DESTROYING})
    transitions = DeploymentTransitions(success=E.DESTROYED, failure=E.DESTROYED)

    def __init__(self, engine: AsyncEngine, events: UserEventPublisher | None = None) -> None:
        self._engine = engine
        self._events = events

    async def execute(self, rows: Sequence[DeploymentRow]) -> OutcomeResult:
        result = OutcomeResult()
        serving = [
            (r, "deployment destroyed") for d in rows for r in d.routes if r.status != RouteStatus.TERMINATING
        ]
        await take_out_of_service(self._engine, self._events, serving, self.name)
        for d in rows:
            if not d.routes:  # every route TERMINATED (those are not read)
                result.successes.append(d.id)
            else:
                result.skipped[d.id] = f"{len(d.routes)} routes still terminating"
        return result
