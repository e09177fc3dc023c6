"""The replacement backoff on real rows: evictions count like failed starts, the deadline is
written on the deployment, and past it replicas come back at most `BURST` at a time; and a scale
that matches the target lands in READY only when every replica is HEALTHY."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import EndpointLifecycle, HandlerOutcome, RouteStatus
from sokovan.db.models import Deployment, Route, RouteHistory
from sokovan.orchestrator.deployment import replacement_backoff
from sokovan.orchestrator.deployment.coordinator import DeploymentCoordinator
from sokovan.orchestrator.deployment.handlers.scaling_deployment import ScalingDeployment
from sokovan.state.serving_reads import fetch_deployments
from tests.orchestrator.db_seed import Seed

E, R = EndpointLifecycle, RouteStatus


async def _ended_routes(
    engine: AsyncEngine, did: uuid.UUID, count: int, handler: str, to: RouteStatus, ago: float
) -> None:
    at = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=ago)
    async with engine.begin() as conn:
        for _ in range(count):
            rid = uuid.uuid4()
            await conn.execute(insert(Route).values(id=rid, deployment_id=did, status=R.TERMINATED.value))
            await conn.execute(
                insert(RouteHistory).values(
                    route_id=rid,
                    handler=handler,
                    result=HandlerOutcome.SUCCESS.value,
                    from_status=R.UNHEALTHY.value if to == R.TERMINATING else R.PROVISIONING.value,
                    to_status=to.value,
                    created_at=at,
                )
            )


async def _scaling(engine: AsyncEngine, replicas: int) -> uuid.UUID:
    seed = await Seed(engine).tenancy()
    did = await seed.deployment(E.SCALING)
    async with engine.begin() as conn:
        await conn.execute(update(Deployment).where(Deployment.id == did).values(replicas=replicas))
    return did


async def test_evictions_count_toward_the_backoff_and_its_deadline_is_on_the_deployment(
    engine: AsyncEngine,
) -> None:
    did = await _scaling(engine, 10)
    await _ended_routes(engine, did, 2, "RouteEviction", R.TERMINATING, ago=1)
    await _ended_routes(engine, did, 2, "ProvisioningRoute", R.FAILED_TO_START, ago=2)
    coordinator = DeploymentCoordinator(engine, {"deployments": [ScalingDeployment(engine)]})
    await coordinator.cycle()
    async with engine.connect() as conn:
        row = (await conn.execute(select(Deployment).where(Deployment.id == did))).one()
        routes = (
            await conn.execute(
                select(Route).where(Route.deployment_id == did, Route.status != R.TERMINATED.value)
            )
        ).all()
    assert routes == []  # 4 failures: 20 s to wait, nothing added
    assert row.status == E.SCALING.value
    assert row.backoff_until is not None
    wait = (row.backoff_until - dt.datetime.now(dt.UTC)).total_seconds()
    assert 15 < wait <= 20
    assert row.status_info["backoff_until"] == row.backoff_until.isoformat()


async def test_past_the_deadline_replicas_come_back_a_few_at_a_time(engine: AsyncEngine) -> None:
    did = await _scaling(engine, 100)
    await _ended_routes(engine, did, 3, "RouteEviction", R.TERMINATING, ago=11)  # 10 s backoff, passed
    now = dt.datetime.now(dt.UTC)
    async with engine.connect() as conn:
        (d,) = await fetch_deployments(conn, frozenset({E.SCALING}))
    allowed = (await replacement_backoff.replacements(engine, [d], now))[did]
    assert allowed.allowed == replacement_backoff.BURST and allowed.until is None
    coordinator = DeploymentCoordinator(engine, {"deployments": [ScalingDeployment(engine)]})
    await coordinator.cycle()
    async with engine.connect() as conn:
        added = (
            await conn.execute(
                select(Route).where(Route.deployment_id == did, Route.status == R.PROVISIONING.value)
            )
        ).all()
        status = (await conn.execute(select(Deployment.status).where(Deployment.id == did))).scalar_one()
    assert len(added) == replacement_backoff.BURST
    assert status == E.SCALING.value  # still short of its target


async def test_a_scale_that_matches_lands_degraded_until_every_replica_is_healthy(
    engine: AsyncEngine,
) -> None:
    did = await _scaling(engine, 2)
    async with engine.begin() as conn:
        for status in (R.HEALTHY, R.DEGRADED):
            await conn.execute(insert(Route).values(id=uuid.uuid4(), deployment_id=did, status=status.value))
    coordinator = DeploymentCoordinator(engine, {"deployments": [ScalingDeployment(engine)]})
    await coordinator.cycle()
    async with engine.connect() as conn:
        row = (await conn.execute(select(Deployment).where(Deployment.id == did))).one()
    assert row.status == E.DEGRADED.value
    assert row.status_info["healthy_replicas"] == 1 and row.status_info["replicas"] == 2
