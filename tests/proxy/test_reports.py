"""The report writer: latest report per route, kept through a failed write, dropped for gone routes.

The outage is a real Redis client pointed at a port where nothing listens.
"""

from __future__ import annotations

import time
import uuid

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from sokovan.bus.routing import HealthReport, read_reports, write_reports
from sokovan.common.settings import Settings
from sokovan.harness import free_port
from sokovan.proxy.reports import ReportWriter


def report(route_id: uuid.UUID, successes: int) -> HealthReport:
    return HealthReport(
        route_id=route_id,
        consecutive_successes=successes,
        last_checked_at=time.time(),
        last_status="200",
        ok=True,
    )


async def test_reports_survive_a_failed_write_and_only_the_latest_is_kept(
    redis: aioredis.Redis, proxy_settings: Settings
) -> None:
    prefix, secret = proxy_settings.etcd_prefix, proxy_settings.cluster_secret or ""
    down = aioredis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))
    target = {"client": down}

    async def write(reports: list[HealthReport]) -> None:
        await write_reports(target["client"], prefix, secret, reports)

    writer = ReportWriter(write)
    kept, gone = uuid.uuid4(), uuid.uuid4()
    writer.put(report(kept, 1))
    writer.put(report(gone, 1))
    assert not await writer.flush()  # Redis is down: nothing lost
    writer.put(report(kept, 2))  # supersedes the one still pending
    writer.discard(gone)  # the route left the table
    target["client"] = redis
    assert await writer.flush()
    assert writer.written == 1
    found = await read_reports(redis, prefix, secret, [kept, gone])
    assert set(found) == {kept} and found[kept].consecutive_successes == 2
    assert await writer.flush() and writer.written == 1  # nothing left pending
    await down.aclose()
