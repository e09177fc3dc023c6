"""Publishes the routing table: per live deployment, the endpoints of its HEALTHY routes (where the
app proxies send traffic; none yet is an empty list) — during a blue-green update only those of the
revision being served — what the proxies need of the deployment (its id, token digest, target and
whether it is autoscaled), and every route whose replica serves (which the proxies probe, from
`initial_delay` after the replica became RUNNING).

It runs every cycle even with no HEALTHY route, so the proxies learn that a route left, and it
keeps the gauge of replicas by route status. It changes no status. An unchanged table is written
again only every `REFRESH` seconds (so a Redis that lost it gets it back), and the gauge is
recounted as often: the route lane cycles whenever sessions move, and most cycles change nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.routing import (
    DeploymentEntry,
    HealthCheck,
    ProbeTarget,
    RoutingBus,
    RoutingTable,
    publish_table,
)
from sokovan.common.metrics import ROUTE_REPLICAS
from sokovan.common.types import EndpointLifecycle
from sokovan.db.engine import autocommit
from sokovan.db.models import Deployment, Route
from sokovan.orchestrator.route.handler import R, RouteHandler, RouteTransitions
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import RouteRow

REFRESH = 5.0


def entry(d: Any) -> DeploymentEntry:
    """What the proxies need of one deployment row (id, token, target, autoscaling)."""
    scaling = d.autoscaling or {}
    return DeploymentEntry(
        id=d.id,
        token_sha256=None if d.open_to_public else d.token_sha256,
        replicas=d.replicas,
        autoscaled=bool(scaling),
        activation_timeout=float(scaling.get("activation_timeout", 60.0)),
    )


class ServiceDiscoverySync(RouteHandler):
    targets = frozenset({R.HEALTHY})
    reads = R.probed()
    transitions = RouteTransitions(success=None, failure=None)
    always_runs = True

    def __init__(self, engine: AsyncEngine, bus: RoutingBus) -> None:
        self._engine = engine  # it only reads, through `autocommit`: no transaction around them
        self._bus = bus
        self._published: tuple[str, float] = ("", 0.0)  # (table content, when)
        self._counted = 0.0

    async def execute(self, rows: Sequence[RouteRow]) -> OutcomeResult:
        table = RoutingTable(generated_at=time.time())
        # Every deployment that is not gone is known to the proxies, with or without a healthy
        # replica: none healthy is a 503 there (or a held request, autoscaled at zero), an unknown
        # name a 404.
        async with autocommit(self._engine).connect() as conn:
            deployments = (
                await conn.execute(
                    select(
                        Deployment.id,
                        Deployment.name,
                        Deployment.token_sha256,
                        Deployment.open_to_public,
                        Deployment.replicas,
                        Deployment.autoscaling,
                        Deployment.serving_revision,
                    ).where(Deployment.status != EndpointLifecycle.DESTROYED.value)
                )
            ).all()
        serving: dict[str, int | None] = {}
        for d in deployments:
            table.routes[d.name] = []
            table.deployments[d.name] = entry(d)
            serving[d.name] = d.serving_revision
        for route in rows:
            if route.endpoint is None:
                continue
            if route.status == R.HEALTHY and serving.get(route.deployment_name) in (None, route.revision):
                table.routes.setdefault(route.deployment_name, []).append(route.endpoint)
            table.probes.append(
                ProbeTarget(
                    route_id=route.id,
                    deployment=route.deployment_name,
                    endpoint=route.endpoint,
                    health_check=HealthCheck.model_validate(route.health_check),
                    since=route.running_since(),
                )
            )
        content = table.model_dump_json(exclude={"generated_at"})
        last, at = self._published
        if content != last or table.generated_at - at > REFRESH:
            await publish_table(self._bus.redis, self._bus.prefix, self._bus.secret, table)
            self._published = (content, table.generated_at)
        if table.generated_at - self._counted > REFRESH:
            await self._count()
            self._counted = table.generated_at
        return OutcomeResult()

    async def _count(self) -> None:
        async with autocommit(self._engine).connect() as conn:
            counts = dict(
                (
                    await conn.execute(
                        select(Route.status, func.count())
                        .where(Route.status != R.TERMINATED.value)
                        .group_by(Route.status)
                    )
                )
                .tuples()
                .all()
            )
        for status in R.live() | {R.TERMINATING, R.FAILED_TO_START}:
            ROUTE_REPLICAS.labels(status=status.value).set(counts.get(status.value, 0))
