"""Autoscaling: sets an autoscaled deployment's `replicas` from what the app proxies measure.

The metric is the deployment's requests in flight (`inflight`) or requests per second (`rps`),
summed over every proxy that reported within the last few seconds (`bus.proxy_load`); the wanted
count is `ceil(metric / target)`, kept within `min_replicas`..`max_replicas`. Going up waits
`scale_up_cooldown` seconds since the last decision, going down `scale_down_cooldown`; zero is
reached only after `scale_to_zero_after` seconds without a request (never when it is null), and a
request held by a proxy for a deployment at zero starts one replica at once (no cooldown). With no
proxy reporting nothing is decided: no measure is not a measure of zero.

Each decision is a guarded write of `replicas` (only if nobody changed it since it was read) and a
deployment history row with the metric value and the counts; the deployment's other handlers then
scale it as if a user had. The handler changes no status itself.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, insert, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.proxy_load import ClusterLoad, DeploymentLoad, read_loads
from sokovan.bus.routing import RoutingBus
from sokovan.common.types import HandlerOutcome
from sokovan.db.models import Deployment, DeploymentHistory
from sokovan.orchestrator.deployment.handler import DeploymentHandler, DeploymentTransitions, E
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import DeploymentRow


def _merged(values: dict[str, Any]) -> Any:
    """The deployment's status_info with `values` set, merged in the statement (not a stale copy)."""
    return Deployment.status_info.op("||")(bindparam(None, values, type_=JSONB))


@dataclass(frozen=True)
class Decision:
    replicas: int
    message: str
    idle_since: float | None  # epoch seconds without a request so far (None: busy)


def decide(d: DeploymentRow, rules: dict[str, Any], load: DeploymentLoad, now: float) -> Decision | None:
    """The new target for `d`, or None to keep it (the idle clock is still returned through
    `Decision` only when something is written)."""
    metric = str(rules.get("metric", "inflight"))
    value = float(load.rps if metric == "rps" else load.inflight)
    target = float(rules.get("target", 1.0)) or 1.0
    low, high = int(rules.get("min_replicas", 0)), int(rules.get("max_replicas", 1))
    zero_after = rules.get("scale_to_zero_after")
    last = float(d.status_info.get("autoscaled_at") or d.created_at.timestamp())
    busy = value > 0 or load.inflight > 0 or load.waiting > 0
    idle_since = None if busy else float(d.status_info.get("idle_since") or now)
    current = d.replicas
    if current == 0 and (load.waiting > 0 or busy):
        wanted = max(1, low, math.ceil(value / target))
        return Decision(min(wanted, max(high, 1)), f"{load.waiting} request(s) held at zero replicas", None)
    floor = low if zero_after is not None else max(low, 1)
    wanted = max(math.ceil(value / target), max(low, 1))
    if (
        not busy
        and zero_after is not None
        and idle_since is not None
        and now - idle_since >= float(zero_after)
    ):
        wanted = floor
    wanted = min(max(wanted, floor), high)
    said = f"{metric} {value:g} (target {target:g} per replica)"
    if wanted > current and now - last >= float(rules.get("scale_up_cooldown", 30.0)):
        return Decision(wanted, f"{said}: {current} -> {wanted} replicas", idle_since)
    if wanted < current and now - last >= float(rules.get("scale_down_cooldown", 120.0)):
        return Decision(wanted, f"{said}: {current} -> {wanted} replicas", idle_since)
    return None


class AutoscaleDeployment(DeploymentHandler):
    targets = frozenset({E.READY, E.DEGRADED, E.SCALING, E.DEPLOYING})
    transitions = DeploymentTransitions(success=None, failure=None)

    def __init__(self, engine: AsyncEngine, bus: RoutingBus) -> None:
        self._engine = engine
        self._bus = bus

    async def execute(self, rows: Sequence[DeploymentRow]) -> OutcomeResult:
        result = OutcomeResult()
        scaled = [d for d in rows if d.autoscaling]
        if not scaled:
            return result
        try:
            load = await read_loads(self._bus.redis, self._bus.prefix, self._bus.secret)
        except Exception as exc:  # Redis away: nothing measured, nothing decided
            for d in scaled:
                result.skipped[d.id] = f"no load measure: {type(exc).__name__}"
            return result
        if load.proxies == 0:
            for d in scaled:
                result.skipped[d.id] = "no proxy reports load"
            return result
        now = dt.datetime.now(dt.UTC)
        for d in scaled:
            await self._one(d, load, now)
        return result

    async def _one(self, d: DeploymentRow, load: ClusterLoad, now: dt.datetime) -> None:
        rules = d.autoscaling or {}
        measured = load.deployments.get(d.id, DeploymentLoad())
        decision = decide(d, rules, measured, now.timestamp())
        idle = None if (measured.inflight or measured.waiting or measured.rps) else now.timestamp()
        known_idle = d.status_info.get("idle_since")
        if decision is None:
            # Nothing decided: a write only when the idle clock starts or stops (most cycles none).
            if (idle is None) != (known_idle is None):
                async with self._engine.begin() as conn:
                    await conn.execute(
                        update(Deployment)
                        .where(Deployment.id == d.id)
                        .values(status_info=_merged({"idle_since": idle}))
                    )
            return
        async with self._engine.begin() as conn:
            moved = await conn.execute(
                update(Deployment)
                .where(
                    Deployment.id == d.id,
                    Deployment.replicas == d.replicas,
                    Deployment.autoscaling.is_not(None),
                    Deployment.status == d.status.value,
                )
                .values(
                    replicas=decision.replicas,
                    status_info=_merged(
                        {"autoscaled_at": now.timestamp(), "idle_since": decision.idle_since}
                    ),
                )
                .returning(Deployment.id)
            )
            if moved.first() is None:
                return
            await conn.execute(
                insert(DeploymentHistory).values(
                    deployment_id=d.id,
                    handler=self.name,
                    result=HandlerOutcome.SUCCESS.value,
                    from_status=d.status.value,
                    to_status=d.status.value,
                    message=decision.message,
                )
            )
