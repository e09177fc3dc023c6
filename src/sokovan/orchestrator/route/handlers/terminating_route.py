"""TERMINATING → TERMINATED once its replica session has ended (it is asked to end here).

A route that served is drained first: it left the routing table when it went TERMINATING, so the
proxies send it nothing new, and its session is asked to end only once every proxy's load report
(`bus.proxy_load`), made under a routing table generated after the route left it, shows no
request in flight on its endpoint — or once `drain_timeout` (the deployment's, 30 s unless set) has
passed. With no proxy reporting there is nothing to wait for.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sokovan.bus.proxy_load import ClusterLoad, read_loads
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
        load: ClusterLoad | None = None
        now = dt.datetime.now(dt.UTC)
        for route in rows:
            if route.session_id is None or route.session_status in SessionStatus.terminal():
                result.successes.append(route.id)
            elif route.session_status != SessionStatus.TERMINATING:
                if (
                    route.endpoint is not None
                    and (now - route.status_changed_at).total_seconds() < route.drain_timeout
                ):
                    load = load if load is not None else await self._load()
                    busy = draining(route, load)
                    if busy is not None:
                        result.skipped[route.id] = busy
                        continue
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

    async def _load(self) -> ClusterLoad:
        try:
            return await read_loads(self._bus.redis, self._bus.prefix, self._bus.secret)
        except Exception:  # Redis away: nothing to drain by, the timeout still bounds the wait
            return ClusterLoad()

    async def _end(self, route: RouteRow) -> str | None:
        assert route.session_id is not None
        try:
            await self._replicas.terminate(route.access_key, route.session_id)
        except Exception as exc:
            return repr(exc)
        return None


def draining(route: RouteRow, load: ClusterLoad) -> str | None:
    """Why the route must wait before its session ends, or None when it is drained."""
    if load.proxies == 0:
        return None
    left = route.status_changed_at.timestamp()
    if load.oldest_table is None or load.oldest_table < left:
        return "draining: waiting for every proxy to apply a routing table without it"
    inflight = load.endpoints.get(route.endpoint or "", 0)
    if inflight:
        return f"draining: {inflight} request(s) in flight"
    return None
