"""The balancer alone: the order in which one request tries a deployment's replicas."""

from __future__ import annotations

import time

from sokovan.bus.routing import RoutingTable
from sokovan.proxy.balancer import Balancer
from tests.proxy.conftest import target


def balancer_for(routes: dict[str, list[str]], probed: list[str] | None = None) -> Balancer:
    balancer = Balancer()
    probes = [target(e, "x") for e in probed or []]
    balancer.apply(RoutingTable(generated_at=time.time(), routes=routes, probes=probes))
    return balancer


def test_every_request_tries_each_replica_once_starting_with_the_next_in_turn() -> None:
    balancer = balancer_for({"app": ["a", "b", "c"]})
    orders = [balancer.candidates("app") for _ in range(4)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def test_ejected_replicas_come_last_and_the_rest_share_evenly() -> None:
    balancer = balancer_for({"app": ["a", "b", "c"]}, probed=["a", "b", "c"])
    balancer.mark_failed("b")
    orders = [balancer.candidates("app") for _ in range(4)]
    assert [o[0] for o in orders] == ["a", "c", "a", "c"]
    assert all(o[-1] == "b" and sorted(o) == ["a", "b", "c"] for o in orders)
    balancer.failing.discard("b")  # what a passing probe does
    assert {balancer.candidates("app")[0] for _ in range(3)} == {"a", "b", "c"}


def test_when_every_replica_is_ejected_all_are_still_tried() -> None:
    balancer = balancer_for({"app": ["a", "b"]}, probed=["a", "b"])
    balancer.mark_failed("a")
    balancer.mark_failed("b")
    assert {tuple(balancer.candidates("app")) for _ in range(2)} == {("a", "b"), ("b", "a")}


def test_an_ejection_nobody_probes_ends_with_the_next_table() -> None:
    balancer = balancer_for({"app": ["a", "b"]})
    balancer.mark_failed("a")
    balancer.apply(RoutingTable(generated_at=time.time(), routes={"app": ["a", "b"]}))
    assert "a" not in balancer.failing


def test_known_deployments_include_those_with_no_healthy_route() -> None:
    balancer = balancer_for({"app": ["a"]})
    balancer.apply(
        RoutingTable(generated_at=time.time(), routes={"app": ["a"]}, probes=[target("b", "starting")])
    )
    assert balancer.knows("app") and balancer.knows("starting") and not balancer.knows("other")
    assert balancer.candidates("starting") == []
    assert Balancer().candidates("app") == []
