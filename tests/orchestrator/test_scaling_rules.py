"""Pure rules of ScalingDeployment: which routes go first when scaling down, and the backoff after
failed starts."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from sokovan.common.types import RouteStatus
from sokovan.orchestrator.deployment.handlers.scaling_deployment import removal_order
from sokovan.orchestrator.deployment.replacement_backoff import backoff
from sokovan.state.serving_reads import RouteRow

R = RouteStatus
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def route(name: str, status: RouteStatus, age_s: int) -> RouteRow:
    return RouteRow(
        id=uuid.uuid5(uuid.NAMESPACE_DNS, name),
        deployment_id=uuid.UUID(int=1),
        deployment_name="d",
        owner=uuid.UUID(int=2),
        access_key="AK",
        status=status,
        status_info={"name": name},
        status_changed_at=T0,
        created_at=T0 - dt.timedelta(seconds=age_s),
        session_id=None,
        session_status=None,
        session_changed_at=None,
        service_addr=None,
        endpoint=None,
        health={},
        health_check={},
        definition={},
        scaling_group="default",
    )


@pytest.mark.parametrize(
    ("routes", "want"),
    [
        # unhealthy first, then degraded, then provisioning, then healthy
        (
            [
                route("h", R.HEALTHY, 9),
                route("u", R.UNHEALTHY, 1),
                route("p", R.PROVISIONING, 5),
                route("d", R.DEGRADED, 3),
            ],
            ["u", "d", "p", "h"],
        ),
        # among healthy ones, the newest first
        (
            [route("old", R.HEALTHY, 30), route("new", R.HEALTHY, 1), route("mid", R.HEALTHY, 10)],
            ["new", "mid", "old"],
        ),
        # an unhealthy old one still goes before a healthy new one
        ([route("new", R.HEALTHY, 1), route("sick", R.UNHEALTHY, 100)], ["sick", "new"]),
    ],
)
def test_scaling_down_removes_unhealthy_first_then_the_newest(
    routes: list[RouteRow], want: list[str]
) -> None:
    assert [r.status_info["name"] for r in removal_order(routes)] == want


@pytest.mark.parametrize(
    ("failures", "wait"), [(0, 0.0), (2, 0.0), (3, 10.0), (4, 20.0), (5, 40.0), (8, 300.0), (50, 300.0)]
)
def test_failed_starts_back_off_doubling_up_to_five_minutes(failures: int, wait: float) -> None:
    assert backoff(failures) == wait
