"""Judges the app proxies' health reports: HEALTHY after `healthy_threshold` passing probes in a row,
UNHEALTHY after `unhealthy_threshold` failing ones, DEGRADED (STALE) when no report is newer than
3 probe intervals — nobody is probing, which is no reason to evict anything.

The route's `health` (consecutive successes and failures, last check and status) is kept up to date
from the reports, whether or not the status changes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.routing import HealthCheck, HealthReport, RoutingBus, read_reports
from sokovan.db.models import Route
from sokovan.orchestrator.route.handler import R, RouteHandler, RouteTransitions
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import RouteRow

STALE_AFTER_INTERVALS = 3


class HealthCheckRoute(RouteHandler):
    targets = frozenset({R.HEALTHY, R.UNHEALTHY, R.DEGRADED})
    transitions = RouteTransitions(success=R.HEALTHY, failure=R.UNHEALTHY, stale=R.DEGRADED)

    def __init__(self, engine: AsyncEngine, bus: RoutingBus) -> None:
        self._engine = engine
        self._bus = bus

    async def execute(self, rows: Sequence[RouteRow]) -> OutcomeResult:
        result = OutcomeResult()
        reports = await read_reports(
            self._bus.redis, self._bus.prefix, self._bus.secret, [r.id for r in rows]
        )
        now = dt.datetime.now(dt.UTC).timestamp()
        health_rows: list[dict[str, Any]] = []
        for route in rows:
            check = HealthCheck.model_validate(route.health_check)
            report = reports.get(route.id)
            health = _health(report) if report is not None else None
            if health is not None and health != route.health:
                health_rows.append({"b_id": route.id, "b_health": health})
            verdict = judge(route, check, report, now)
            if verdict == "success":
                result.successes.append(route.id)
            elif verdict == "failure":
                result.failures[route.id] = f"{report.consecutive_failures if report else 0} failed probes"
            elif verdict == "stale":
                result.stale[route.id] = "no probe result newer than 3 intervals"
        if health_rows:
            async with self._engine.begin() as conn:
                await conn.execute(
                    update(Route)
                    .where(Route.id == bindparam("b_id"))
                    .values(health=bindparam("b_health"))
                    .execution_options(synchronize_session=False),
                    health_rows,
                )
        return result


def judge(route: RouteRow, check: HealthCheck, report: HealthReport | None, now: float) -> str | None:
    """'success', 'failure', 'stale' or None (not enough evidence either way) for one route."""
    # A replica just started gets its initial delay (from its RUNNING) and a window to be probed.
    started = route.running_since() if route.status == R.DEGRADED else 0.0
    window = STALE_AFTER_INTERVALS * check.interval
    if report is None or now - report.last_checked_at > window:
        if now - started <= check.initial_delay + window:
            return None
        return "stale"
    if report.ok and report.consecutive_successes >= check.healthy_threshold:
        return "success"
    if not report.ok and report.consecutive_failures >= check.unhealthy_threshold:
        return "failure"
    return None


def _health(report: HealthReport) -> dict[str, Any]:
    return {
        "consecutive_successes": report.consecutive_successes,
        "consecutive_failures": report.consecutive_failures,
        "last_checked_at": dt.datetime.fromtimestamp(report.last_checked_at, dt.UTC).isoformat(),
        "last_status": report.last_status,
    }
