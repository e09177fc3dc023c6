"""DEPLOYING → READY or DEGRADED: carry an update out, one step per cycle (`rollout_plan`).

Each cycle adds the routes of the new revision the strategy allows (as many as the replacement
backoff lets through), takes old ones out of service (they are drained: out of the routing table
first, their sessions ended once the proxies have nothing in flight on them), and for blue-green
switches the routing table to the new revision in one change. When the new revision serves alone,
at the target, and no old route is left even draining, the rollout is cleared and the deployment
is READY (every replica HEALTHY) or DEGRADED (fewer).

A revision with no HEALTHY replica `rollback_after` seconds after its rollout started is rolled back
by itself (`rollouts.roll_back`): the previous revision becomes current again and the same steps
bring it back, while its replicas that never left keep serving.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.user_events import UserEventPublisher, publish
from sokovan.common.types import RouteStatus
from sokovan.db.models import Deployment
from sokovan.orchestrator.deployment import replacement_backoff
from sokovan.orchestrator.deployment.handler import DeploymentHandler, DeploymentTransitions, E
from sokovan.orchestrator.deployment.handlers.scaling_deployment import healthy, judge_health
from sokovan.orchestrator.deployment.rollout_plan import Step, plan
from sokovan.orchestrator.deployment.route_adds import add_routes
from sokovan.orchestrator.route.kind import take_out_of_service
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.rollouts import roll_back
from sokovan.state.serving_reads import DeploymentRow, RouteRow


def overdue(d: DeploymentRow, now: dt.datetime) -> bool:
    """The new revision had its `rollback_after` and not one replica of it is HEALTHY."""
    rollout = d.rollout or {}
    if rollout.get("rolled_back") or d.replicas == 0:
        return False
    try:
        started = dt.datetime.fromisoformat(str(rollout["started_at"]))
        deadline = started + dt.timedelta(seconds=float(rollout.get("rollback_after", 600)))
    except (KeyError, ValueError, TypeError):
        return False
    if now < deadline:
        return False
    return not any(r.status == RouteStatus.HEALTHY and r.revision == d.revision for r in d.live_routes)


class DeployingDeployment(DeploymentHandler):
    targets = frozenset({E.DEPLOYING})
    transitions = DeploymentTransitions(success=E.READY, failure=E.DEGRADED)

    def __init__(self, engine: AsyncEngine, events: UserEventPublisher | None = None) -> None:
        self._engine = engine
        self._events = events

    async def execute(self, rows: Sequence[DeploymentRow]) -> OutcomeResult:
        result = OutcomeResult()
        now = dt.datetime.now(dt.UTC)
        steps: list[tuple[DeploymentRow, Step]] = []
        for d in rows:
            if overdue(d, now):
                await self._roll_back(d)
                result.skipped[d.id] = f"revision {d.revision} never became HEALTHY: rolled back"
                continue
            steps.append((d, plan(d)))
        growing = [d for d, s in steps if s.add > 0]
        allowed = await replacement_backoff.replacements(self._engine, growing, now)
        await replacement_backoff.record(self._engine, growing, {d.id: allowed[d.id].until for d in growing})
        missing: list[tuple[DeploymentRow, int]] = []
        surplus: list[tuple[RouteRow, str]] = []
        for d, step in steps:
            if step.done:
                await self._set(d, rollout=None, serving_revision=None)
                result.info[d.id] = {
                    "scaled_to": d.replicas,
                    "revision": d.revision,
                    "rolled_back": bool((d.rollout or {}).get("rolled_back")),
                }
                judge_health(d, result, healthy(d.live_routes))
                continue
            if step.switch:
                await self._set(d, serving_revision=d.revision)  # one routing-table change
            surplus += step.remove
            may = allowed.get(d.id)
            count = step.add if may is None or may.allowed is None else min(step.add, may.allowed)
            if count > 0:
                missing.append((d, count))
            waiting = step.add > 0 and count == 0 and may is not None and may.why
            result.skipped[d.id] = f"{step.progress}; {may.why}" if waiting and may else step.progress
        await take_out_of_service(self._engine, self._events, surplus, self.name)
        await add_routes(self._engine, self._events, self.name, missing, E.DEPLOYING)
        return result

    async def _set(self, d: DeploymentRow, **values: Any) -> None:
        """Write `values` on the deployment, only while it is still DEPLOYING at the revision read
        (a newer update or a rollback meanwhile wins)."""
        async with self._engine.begin() as conn:
            await conn.execute(
                update(Deployment)
                .where(
                    Deployment.id == d.id,
                    Deployment.revision == d.revision,
                    Deployment.status == E.DEPLOYING.value,
                )
                .values(**values)
            )

    async def _roll_back(self, d: DeploymentRow) -> None:
        rollout = d.rollout or {}
        after = rollout.get("rollback_after", 600)
        why = f"no replica of revision {d.revision} HEALTHY {after} s after the update"
        async with self._engine.begin() as conn:
            done = await roll_back(conn, d.id, handler=self.name, reason=why)
        if done is not None:
            await publish(self._events, [done.event(self.name)])
