"""When a route taken out of service may have its session ended (`terminating_route.draining`)."""

from __future__ import annotations

import dataclasses
import datetime as dt

from sokovan.bus.proxy_load import ClusterLoad
from sokovan.common.types import RouteStatus
from sokovan.orchestrator.route.handlers.terminating_route import draining
from tests.orchestrator.test_rollout_rules import route

LEFT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
ROUTE = dataclasses.replace(
    route(1, RouteStatus.TERMINATING, 0), status_changed_at=LEFT, endpoint="http://h:1"
)
AFTER = LEFT.timestamp() + 1


def test_with_no_proxy_there_is_nothing_to_wait_for() -> None:
    assert draining(ROUTE, ClusterLoad()) is None


def test_a_proxy_still_under_a_table_with_the_route_is_waited_for() -> None:
    load = ClusterLoad(proxies=2, oldest=AFTER, oldest_table=LEFT.timestamp() - 5)
    assert draining(ROUTE, load) == "draining: waiting for every proxy to apply a routing table without it"
    never = ClusterLoad(proxies=1, oldest=AFTER, oldest_table=None)  # a proxy that has read no table
    assert draining(ROUTE, never) is not None


def test_requests_in_flight_on_its_endpoint_are_waited_for_then_it_is_drained() -> None:
    busy = ClusterLoad(
        proxies=1, oldest=AFTER, oldest_table=AFTER, endpoints={"http://h:1": 2, "http://h:2": 9}
    )
    assert draining(ROUTE, busy) == "draining: 2 request(s) in flight"
    idle = ClusterLoad(proxies=1, oldest=AFTER, oldest_table=AFTER, endpoints={"http://h:2": 9})
    assert draining(ROUTE, idle) is None
