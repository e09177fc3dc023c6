"""TERMINATING → TERMINATED once its replica session has ended (it is asked to end here)."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.bus.routing import RoutingBus, forget_reports
from sokovan.common.types import SessionStatus
from sokovan.orchestrator.deployment.replicas import ReplicaSessions
from sokovan.orchestrator.route.handler import R, RouteHandler, RouteTransitions
from sokovan.orchestrator.spine.concurrency import bounded_gather
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
        to_end = []
        for route in rows:
            if route.session_id is None or route.session_status in SessionStatus.terminal():
                result.successes.append(route.id)
            elif route.session_status != SessionStatus.TERMINATING:
                to_end.append(route)
            else:
                result.skipped[route.id] = "waiting for its session to end"
        for route, error in zip(to_end, await bounded_gather([self._end(r) for r in to_end]), strict=True):
            if error is not None:  # the next cycle asks again
                result.failures[route.id] = f"terminating its session failed: {error}"
            else:
                result.skipped[route.id] = "waiting for its session to end"
        await forget_reports(self._bus.redis, self._bus.prefix, list(result.successes))
        return result

    async def _end(self, route: RouteRow) -> str | None:
        assert route.session_id is not None
        try:
            await self._replicas.terminate(route.access_key, route.session_id)
        except Exception as exc:
            return repr(exc)
        return None
