"""Every (handler, outcome) pair of the deployment and route tables, applied by their coordinators
to real rows.

The handlers are the real ones (their names, targets and tables); only `execute` is replaced so
that each outcome can be forced. The expected statuses are the design's tables, written out here.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.routing import RoutingBus
from sokovan.common.types import EndpointLifecycle, HandlerOutcome, RouteStatus
from sokovan.db.models import Deployment, DeploymentHistory, Route, RouteHistory
from sokovan.orchestrator.deployment.coordinator import DeploymentCoordinator
from sokovan.orchestrator.deployment.handler import DeploymentHandler
from sokovan.orchestrator.orchestrator import deployment_lanes, route_lanes
from sokovan.orchestrator.route.coordinator import RouteCoordinator
from sokovan.orchestrator.route.handler import RouteHandler
from sokovan.orchestrator.spine.outcome import OutcomeHandler, OutcomeResult
from tests.orchestrator.db_seed import Seed

E, R = EndpointLifecycle, RouteStatus
S, F, ST = HandlerOutcome.SUCCESS, HandlerOutcome.FAILURE, HandlerOutcome.STALE

DEPLOYMENT_TABLE: dict[str, list[tuple[E, HandlerOutcome, E]]] = {
    "CheckPendingDeployment": [(E.PENDING, S, E.SCALING), (E.PENDING, F, E.PENDING)],
    "ScalingDeployment": [(E.SCALING, S, E.READY), (E.SCALING, F, E.DEGRADED)],
    "CheckReplicaDeployment": [
        (E.READY, S, E.SCALING),
        (E.READY, F, E.READY),
        (E.DEGRADED, S, E.SCALING),
        (E.DEGRADED, F, E.DEGRADED),
    ],
    "ReconcileDeployment": [
        (E.READY, S, E.READY),
        (E.READY, F, E.SCALING),
        (E.DEGRADED, S, E.DEGRADED),
        (E.DEGRADED, F, E.SCALING),
    ],
    "DeployingDeployment": [(E.DEPLOYING, S, E.READY), (E.DEPLOYING, F, E.DEGRADED)],
    "DeploymentHealth": [
        (E.READY, S, E.READY),
        (E.READY, F, E.DEGRADED),
        (E.DEGRADED, S, E.READY),
        (E.DEGRADED, F, E.DEGRADED),
    ],
    "AutoscaleDeployment": [(E.READY, S, E.READY), (E.SCALING, F, E.SCALING)],
    "DestroyingDeployment": [(E.DESTROYING, S, E.DESTROYED), (E.DESTROYING, F, E.DESTROYED)],
}
ROUTE_TABLE: dict[str, list[tuple[R, HandlerOutcome, R]]] = {
    "ProvisioningRoute": [(R.PROVISIONING, S, R.DEGRADED), (R.PROVISIONING, F, R.FAILED_TO_START)],
    "HealthCheckRoute": [
        (R.DEGRADED, S, R.HEALTHY),
        (R.UNHEALTHY, S, R.HEALTHY),
        (R.HEALTHY, F, R.UNHEALTHY),
        (R.DEGRADED, F, R.UNHEALTHY),
        (R.HEALTHY, ST, R.DEGRADED),
        (R.UNHEALTHY, ST, R.DEGRADED),
    ],
    "RunningRoute": [
        (R.HEALTHY, S, R.HEALTHY),
        (R.HEALTHY, F, R.TERMINATING),
        (R.DEGRADED, F, R.TERMINATING),
        (R.UNHEALTHY, F, R.TERMINATING),
        (R.FAILED_TO_START, F, R.TERMINATING),
    ],
    "RouteEviction": [(R.UNHEALTHY, S, R.TERMINATING), (R.UNHEALTHY, F, R.UNHEALTHY)],
    "TerminatingRoute": [(R.TERMINATING, S, R.TERMINATED), (R.TERMINATING, F, R.TERMINATING)],
    "ServiceDiscoverySync": [(R.HEALTHY, S, R.HEALTHY), (R.HEALTHY, F, R.HEALTHY)],
}


class _NoReplicas:
    """Never called: every `execute` is forced here."""

    async def ensure(self, spec: object) -> uuid.UUID:
        raise AssertionError("not called")

    async def terminate(self, access_key: str, session_id: uuid.UUID) -> None:
        raise AssertionError("not called")


def _real_handlers() -> dict[str, OutcomeHandler[Any, Any]]:
    from sokovan.orchestrator.orchestrator import Serving

    serving = Serving(RoutingBus(aioredis.Redis(), "unused", "unused"), _NoReplicas())
    found: dict[str, OutcomeHandler[Any, Any]] = {}
    for lane in [*deployment_lanes(None, None, serving.bus).values(), *route_lanes(None, serving).values()]:  # type: ignore[arg-type]
        found.update({h.name: h for h in lane})
    return found


HANDLERS = _real_handlers()


def forced(handler: OutcomeHandler[Any, Any], outcome: HandlerOutcome) -> Any:
    """The real handler's declarations, with work that always ends in `outcome`."""
    base: type[Any] = DeploymentHandler if isinstance(handler, DeploymentHandler) else RouteHandler

    class Forced(base):  # type: ignore[misc,valid-type]
        name = handler.name
        targets = handler.targets
        reads = handler.reads
        transitions = handler.transitions
        always_runs = handler.always_runs

        async def execute(self, rows: Sequence[Any]) -> OutcomeResult:
            ids = [r.id for r in rows]
            if outcome is S:
                return OutcomeResult(successes=ids)
            if outcome is F:
                return OutcomeResult(failures=dict.fromkeys(ids, "forced failure"))
            return OutcomeResult(stale=dict.fromkeys(ids, "forced stale"))

    return Forced()


async def _route(engine: AsyncEngine, deployment_id: uuid.UUID, status: R) -> uuid.UUID:
    rid = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(
            insert(Route).values(
                id=rid, deployment_id=deployment_id, status=status.value, endpoint="http://x"
            )
        )
    return rid


DEPLOYMENT_CASES = [(h, *row) for h, rows in DEPLOYMENT_TABLE.items() for row in rows]
ROUTE_CASES = [(h, *row) for h, rows in ROUTE_TABLE.items() for row in rows]


@pytest.mark.parametrize(
    ("name", "start", "outcome", "want"),
    DEPLOYMENT_CASES,
    ids=[f"{h}-{s}-{o}" for h, s, o, _ in DEPLOYMENT_CASES],
)
async def test_each_deployment_outcome_lands_where_the_table_says(
    engine: AsyncEngine, name: str, start: E, outcome: HandlerOutcome, want: E
) -> None:
    seed = await Seed(engine).tenancy()
    did = await seed.deployment(start)
    await DeploymentCoordinator(engine, {"all": [forced(HANDLERS[name], outcome)]}).cycle()
    async with engine.connect() as conn:
        status = (await conn.execute(select(Deployment.status).where(Deployment.id == did))).scalar_one()
        history = (
            await conn.execute(
                select(
                    DeploymentHistory.handler, DeploymentHistory.result, DeploymentHistory.to_status
                ).where(DeploymentHistory.deployment_id == did)
            )
        ).all()
    assert status == want.value
    if want != start or outcome is not S:
        assert [tuple(h) for h in history] == [(name, outcome.value, want.value)]
    else:
        assert history == []  # a success that changes nothing writes nothing


@pytest.mark.parametrize(
    ("name", "start", "outcome", "want"), ROUTE_CASES, ids=[f"{h}-{s}-{o}" for h, s, o, _ in ROUTE_CASES]
)
async def test_each_route_outcome_lands_where_the_table_says(
    engine: AsyncEngine, name: str, start: R, outcome: HandlerOutcome, want: R
) -> None:
    seed = await Seed(engine).tenancy()
    rid = await _route(engine, await seed.deployment(E.READY), start)
    await RouteCoordinator(engine, {"all": [forced(HANDLERS[name], outcome)]}).cycle()
    async with engine.connect() as conn:
        status = (await conn.execute(select(Route.status).where(Route.id == rid))).scalar_one()
        results = list(
            (await conn.execute(select(RouteHistory.result).where(RouteHistory.route_id == rid))).scalars()
        )
    assert status == want.value
    if want != start or outcome is F:
        assert results == [outcome.value]
    if outcome is S and want == start:
        assert results == []


async def test_a_repeated_failure_is_one_history_row(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    did = await seed.deployment(E.SCALING)
    coordinator = DeploymentCoordinator(engine, {"all": [forced(HANDLERS["ScalingDeployment"], F)]})
    for _ in range(3):
        await coordinator.cycle()
    async with engine.connect() as conn:
        rows = (
            await conn.execute(select(DeploymentHistory.id).where(DeploymentHistory.deployment_id == did))
        ).all()
    assert len(rows) == 1


def test_the_tables_cover_every_handler() -> None:
    assert set(HANDLERS) == set(DEPLOYMENT_TABLE) | set(ROUTE_TABLE)
