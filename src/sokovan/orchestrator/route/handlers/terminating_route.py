"""TERMINATING → TERMINATED once its replica session has ended (it is asked to end here)."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.bus.routing import RoutingBus, forget_reports
from sokovan.common.types import SessionStatus
from sokovan.orchestrator.deployment.replicas import ReplicaSessions
from sokovan.orchestrator.route.handler import R, RouteHandler, RouteTransitions
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import RouteRow


class TerminatingRoute(RouteHandler):
    targets = frozenset({R.TERMINATING})
    transitions = RouteTransitions(success=R.TERMINATED, failure=None)

    def __init__(self, replicas: ReplicaSessions, bus: RoutingBus) -> None:
        self._replicas = replicas
        self._bus = bus

    async def execute(self, rows: Sequence[RouteRow]) -> OutcomeResult:
        result = OutcomeResult()
        for route in rows:
            if route.session_id is None or route.session_status in SessionStatus.terminal():
                result.successes.append(route.id)
                continue
            if route.session_status != SessionStatus.TERMINATING:
                try:
                    await self._replicas.terminate(route.access_key, route.session_id)
                except Exception as exc:  # the next cycle asks again
                    result.failures[route.id] = f"terminating its session failed: {exc!r}"
                    continue
            result.skipped[route.id] = "waiting for its session to end"
        await forget_reports(self._bus.redis, self._bus.prefix, list(result.successes))
        return result
