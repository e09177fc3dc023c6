"""Pure rules of updates and autoscaling: what one rollout cycle does (`rollout_plan.plan`), stepped
through to the end as the route coordinator would move the routes, and the autoscaler's
decisions (`decide`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

import pytest

from sokovan.bus.proxy_load import DeploymentLoad
from sokovan.common.types import EndpointLifecycle, RouteStatus
from sokovan.orchestrator.deployment.handlers.autoscale_deployment import decide
from sokovan.orchestrator.deployment.rollout_plan import plan, resolve
from sokovan.state.serving_reads import DeploymentRow, RouteRow

R = RouteStatus
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def route(revision: int, status: RouteStatus, n: int) -> RouteRow:
    return RouteRow(
        id=uuid.uuid4(),
        deployment_id=uuid.UUID(int=1),
        deployment_name="d",
        owner=uuid.UUID(int=2),
        access_key="AK",
        status=status,
        status_info={},
        status_changed_at=T0,
        created_at=T0 + dt.timedelta(seconds=n),
        session_id=None,
        session_status=None,
        session_changed_at=None,
        service_addr=None,
        endpoint=None,
        health={},
        health_check={},
        definition={},
        scaling_group="default",
        revision=revision,
    )


def deployment(
    routes: list[RouteRow], replicas: int, strategy: dict[str, Any], **extra: Any
) -> DeploymentRow:
    return DeploymentRow(
        id=uuid.UUID(int=1),
        name="d",
        type="custom",
        access_key="AK",
        owner=uuid.UUID(int=2),
        scaling_group="default",
        replicas=replicas,
        definition={},
        health_check={},
        replica_seq=0,
        status=EndpointLifecycle.DEPLOYING,
        status_info=extra.pop("status_info", {}),
        status_changed_at=T0,
        created_at=extra.pop("created_at", T0),
        routes=tuple(routes),
        revision=2,
        rollout={"from_revision": 1, "to_revision": 2, "strategy": strategy, "started_at": T0.isoformat()},
        **extra,
    )


def run_rollout(replicas: int, strategy: dict[str, Any]) -> list[tuple[int, int, int]]:
    """Step a rollout of `replicas` old HEALTHY routes to the end, new routes becoming HEALTHY one
    cycle after they are added; per cycle (live routes, HEALTHY routes, HEALTHY old routes)."""
    routes = [route(1, R.HEALTHY, i) for i in range(replicas)]
    seen: list[tuple[int, int, int]] = []
    n = replicas
    for _ in range(100):
        d = deployment(routes, replicas, strategy)
        step = plan(d)
        if step.done:
            return seen
        gone = {r.id for r, _ in step.remove}
        routes = [dataclasses.replace(r, status=R.HEALTHY) for r in routes if r.id not in gone]
        for _ in range(step.add):
            n += 1
            routes.append(route(2, R.PROVISIONING, n))
        seen.append(
            (
                len(routes),
                sum(r.status == R.HEALTHY for r in routes),
                sum(r.status == R.HEALTHY and r.revision == 1 for r in routes),
            )
        )
    raise AssertionError("the rollout never ended")


@pytest.mark.parametrize(
    ("strategy", "most_live", "least_healthy"),
    [
        ({"type": "rolling", "max_surge": "1", "max_unavailable": "0"}, 5, 4),
        ({"type": "rolling", "max_surge": "2", "max_unavailable": "0"}, 6, 4),
        ({"type": "rolling", "max_surge": "0", "max_unavailable": "1"}, 4, 3),
        ({"type": "rolling", "max_surge": "25%", "max_unavailable": "25%"}, 5, 3),
        ({"type": "rolling", "max_surge": "0", "max_unavailable": "0"}, 5, 4),  # both zero: a surge of one
    ],
)
def test_a_rolling_update_keeps_within_surge_and_availability(
    strategy: dict[str, Any], most_live: int, least_healthy: int
) -> None:
    cycles = run_rollout(4, strategy)
    assert cycles, "an update of four replicas takes cycles"
    assert max(live for live, _, _ in cycles) <= most_live
    assert min(healthy for _, healthy, _ in cycles) >= least_healthy
    assert cycles[-1][2] == 0  # no old replica left


def test_with_no_unavailability_an_old_replica_goes_only_for_a_healthy_new_one() -> None:
    old = [route(1, R.HEALTHY, i) for i in range(4)]
    start = plan(deployment(old, 4, {"type": "rolling", "max_surge": "1", "max_unavailable": "0"}))
    assert (start.add, start.remove) == (1, [])
    starting = plan(deployment([*old, route(2, R.DEGRADED, 9)], 4, {"type": "rolling"}))
    assert (starting.add, starting.remove) == (0, [])  # the new one is not HEALTHY yet
    served = plan(deployment([*old, route(2, R.HEALTHY, 9)], 4, {"type": "rolling"}))
    assert len(served.remove) == 1 and served.remove[0][0].revision == 1 and served.add == 1


def test_blue_green_adds_a_whole_set_and_switches_once_it_is_all_healthy() -> None:
    old = [route(1, R.HEALTHY, i) for i in range(3)]
    first = plan(deployment(old, 3, {"type": "blue_green"}))
    assert (first.add, first.remove, first.switch) == (3, [], False)
    half = [route(2, R.HEALTHY, 10), route(2, R.HEALTHY, 11), route(2, R.DEGRADED, 12)]
    waiting = plan(deployment([*old, *half], 3, {"type": "blue_green"}))
    assert (waiting.add, waiting.remove, waiting.switch) == (0, [], False)
    ready = [route(2, R.HEALTHY, 10 + i) for i in range(3)]
    switch = plan(deployment([*old, *ready], 3, {"type": "blue_green"}))
    assert switch.switch and sorted(r.revision for r, _ in switch.remove) == [1, 1, 1]
    draining = [dataclasses.replace(r, status=R.TERMINATING) for r in old]
    assert not plan(deployment([*ready, *draining], 3, {"type": "blue_green"})).done  # still draining
    assert plan(deployment(ready, 3, {"type": "blue_green"})).done


@pytest.mark.parametrize(
    ("value", "replicas", "up", "want"),
    [
        ("1", 4, True, 1),
        (2, 4, False, 2),
        ("25%", 4, True, 1),
        ("25%", 5, True, 2),
        ("25%", 5, False, 1),
        ("0%", 9, True, 0),
    ],
)
def test_surge_and_unavailable_resolve_like_kubernetes(
    value: Any, replicas: int, up: bool, want: int
) -> None:
    assert resolve(value, replicas, round_up=up) == want


RULES = {
    "metric": "inflight",
    "target": 2.0,
    "min_replicas": 0,
    "max_replicas": 5,
    "scale_up_cooldown": 30.0,
    "scale_down_cooldown": 120.0,
    "scale_to_zero_after": 60.0,
}


def scaled(replicas: int, last: float | None = None, idle_since: float | None = None) -> DeploymentRow:
    info: dict[str, Any] = {}
    if last is not None:
        info["autoscaled_at"] = last
    if idle_since is not None:
        info["idle_since"] = idle_since
    d = deployment([], replicas, {"type": "rolling"}, status_info=info)
    return dataclasses.replace(d, status=EndpointLifecycle.READY, rollout=None)


NOW = T0.timestamp() + 10_000


def test_load_above_the_target_scales_up_once_the_cooldown_passed() -> None:
    busy = DeploymentLoad(inflight=7)
    assert decide(scaled(1, last=NOW - 5), RULES, busy, NOW) is None  # within the up cooldown
    decision = decide(scaled(1, last=NOW - 31), RULES, busy, NOW)
    assert decision is not None and decision.replicas == 4  # ceil(7 / 2)
    assert "inflight 7" in decision.message and "1 -> 4" in decision.message
    capped = decide(scaled(1, last=NOW - 31), RULES, DeploymentLoad(inflight=100), NOW)
    assert capped is not None and capped.replicas == 5


def test_load_gone_scales_down_after_its_cooldown_and_to_zero_after_the_idle_delay() -> None:
    light = DeploymentLoad(inflight=1, rps=3.0)
    assert decide(scaled(4, last=NOW - 60), RULES, light, NOW) is None  # within the down cooldown
    down = decide(scaled(4, last=NOW - 121), RULES, light, NOW)
    assert down is not None and down.replicas == 1
    idle = DeploymentLoad()
    assert decide(scaled(1, last=NOW - 500, idle_since=NOW - 30), RULES, idle, NOW) is None
    zero = decide(scaled(1, last=NOW - 500, idle_since=NOW - 61), RULES, idle, NOW)
    assert zero is not None and zero.replicas == 0
    never = {**RULES, "scale_to_zero_after": None}
    assert decide(scaled(1, last=NOW - 500, idle_since=NOW - 9999), never, idle, NOW) is None


def test_a_request_held_at_zero_starts_a_replica_at_once() -> None:
    decision = decide(scaled(0, last=NOW - 1), RULES, DeploymentLoad(waiting=1), NOW)
    assert decision is not None and decision.replicas == 1 and "held" in decision.message


def test_rps_is_the_metric_when_asked() -> None:
    rules = {**RULES, "metric": "rps", "target": 10.0}
    decision = decide(scaled(1, last=NOW - 31), rules, DeploymentLoad(inflight=0, rps=45.0), NOW)
    assert decision is not None and decision.replicas == 5
