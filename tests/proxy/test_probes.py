"""Probing: pass/fail counting, timeouts, refused connections, initial delay, continuing after a
restart, routes leaving the table, and bounded concurrency over many routes."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from sokovan.bus.routing import HealthReport, read_reports, write_reports
from sokovan.common.settings import Settings
from tests.proxy.backends import dead_endpoint
from tests.proxy.conftest import Backends, StartProxy, applied, eventually, publish, target


async def report_of(redis: aioredis.Redis, settings: Settings, route_id: uuid.UUID) -> HealthReport | None:
    reports = await read_reports(redis, settings.etcd_prefix, settings.cluster_secret or "", [route_id])
    return reports.get(route_id)


def reported(
    redis: aioredis.Redis, settings: Settings, route_id: uuid.UUID, ok: Callable[[HealthReport], bool]
) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        report = await report_of(redis, settings, route_id)
        return report is not None and ok(report)

    return check


async def test_passes_and_failures_are_counted_and_reported(
    redis: aioredis.Redis, proxy_settings: Settings, start_proxy: StartProxy, backends: Backends
) -> None:
    (replica,) = await backends("r1")
    route = target(replica.url, interval=0.05)
    proxy = await start_proxy()
    await applied(proxy, await publish(redis, proxy_settings, probes=[route]))
    await eventually(reported(redis, proxy_settings, route.route_id, lambda r: r.consecutive_successes >= 3))
    report = await report_of(redis, proxy_settings, route.route_id)
    assert report is not None
    assert report.ok and report.last_status == "200" and report.consecutive_failures == 0
    assert time.time() - report.last_checked_at < 2

    replica.health_status = 503
    await eventually(reported(redis, proxy_settings, route.route_id, lambda r: r.consecutive_failures >= 2))
    report = await report_of(redis, proxy_settings, route.route_id)
    assert report is not None
    assert not report.ok and report.last_status == "503" and report.consecutive_successes == 0


async def test_timeouts_and_refused_connections_fail(
    redis: aioredis.Redis, proxy_settings: Settings, start_proxy: StartProxy, backends: Backends
) -> None:
    (slow,) = await backends("slow")
    slow.health_delay = 2.0
    timing_out = target(slow.url, interval=0.2, timeout=0.1)
    refused = target(dead_endpoint(), interval=0.2)
    proxy = await start_proxy()
    await applied(proxy, await publish(redis, proxy_settings, probes=[timing_out, refused]))
    for route, status in ((timing_out, "timeout"), (refused, "connection refused")):

        def failed_with(report: HealthReport, status: str = status) -> bool:
            return report.consecutive_failures >= 2 and report.last_status == status and not report.ok

        await eventually(reported(redis, proxy_settings, route.route_id, failed_with))


async def test_probes_wait_for_the_initial_delay(
    redis: aioredis.Redis, proxy_settings: Settings, start_proxy: StartProxy, backends: Backends
) -> None:
    (replica,) = await backends("r1")
    since = time.time()
    route = target(replica.url, since=since, interval=0.05, initial_delay=1.0)
    proxy = await start_proxy()
    await applied(proxy, await publish(redis, proxy_settings, probes=[route]))
    await asyncio.sleep(0.5)
    assert replica.health_hits == 0
    assert await report_of(redis, proxy_settings, route.route_id) is None
    await eventually(reported(redis, proxy_settings, route.route_id, lambda r: r.ok))
    report = await report_of(redis, proxy_settings, route.route_id)
    assert report is not None and report.last_checked_at >= since + 1.0


async def test_a_restarted_proxy_continues_from_the_last_report(
    redis: aioredis.Redis, proxy_settings: Settings, start_proxy: StartProxy, backends: Backends
) -> None:
    (replica,) = await backends("r1")
    route = target(replica.url, interval=60)  # one probe during the test
    before = time.time() - 5
    previous = HealthReport(
        route_id=route.route_id,
        consecutive_successes=7,
        consecutive_failures=0,
        last_checked_at=before,
        last_status="200",
        ok=True,
    )
    await write_reports(redis, proxy_settings.etcd_prefix, proxy_settings.cluster_secret or "", [previous])
    proxy = await start_proxy()
    await applied(proxy, await publish(redis, proxy_settings, probes=[route]))
    await eventually(reported(redis, proxy_settings, route.route_id, lambda r: r.last_checked_at > before))
    report = await report_of(redis, proxy_settings, route.route_id)
    assert report is not None and report.consecutive_successes == 8


async def test_routes_that_leave_the_table_are_no_longer_probed(
    redis: aioredis.Redis, proxy_settings: Settings, start_proxy: StartProxy, backends: Backends
) -> None:
    staying, leaving = await backends("staying", "leaving")
    kept, dropped = target(staying.url, interval=0.05), target(leaving.url, interval=0.05)
    proxy = await start_proxy()
    await applied(proxy, await publish(redis, proxy_settings, probes=[kept, dropped]))

    async def both_probed() -> bool:
        return staying.health_hits > 0 and leaving.health_hits > 0

    await eventually(both_probed)
    await applied(proxy, await publish(redis, proxy_settings, probes=[kept]))
    assert proxy.prober.targets == 1
    hits_then, kept_then = leaving.health_hits, staying.health_hits
    await asyncio.sleep(0.5)
    assert leaving.health_hits == hits_then
    assert staying.health_hits > kept_then + 3


async def test_a_thousand_routes_are_probed_with_bounded_concurrency(
    redis: aioredis.Redis, proxy_settings: Settings, start_proxy: StartProxy, backends: Backends
) -> None:
    (fleet,) = await backends("fleet")  # like a hollow fleet: every route on one server
    fleet.health_delay = 0.01
    routes = [target(fleet.url, f"d{i % 50}", interval=30, timeout=5) for i in range(1000)]
    proxy = await start_proxy(probe_concurrency=20)
    await applied(proxy, await publish(redis, proxy_settings, probes=routes))

    async def all_reported() -> bool:
        return proxy.writer.written >= 1000 and fleet.health_hits >= 1000

    await eventually(all_reported, within=30)
    assert fleet.health_max_in_flight <= 20
    ids = [r.route_id for r in routes]
    reports = await read_reports(redis, proxy_settings.etcd_prefix, proxy_settings.cluster_secret or "", ids)
    assert len(reports) == 1000 and all(r.ok for r in reports.values())
