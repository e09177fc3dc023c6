"""The routing bus's sealed values, over real Redis: bound to their kind and key, with a sane time."""

from __future__ import annotations

import json
import time
import uuid

import redis.asyncio as aioredis

from sokovan.bus.routing import (
    HealthReport,
    RoutingTable,
    health_key,
    proxies_key,
    proxy_urls,
    publish_table,
    read_reports,
    read_table,
    register_proxy,
    table_key,
    write_reports,
)
from sokovan.common.settings import Settings

SECRET = "routing-secret"


def own_prefix(settings: Settings) -> str:
    return f"{settings.etcd_prefix}-routing-{uuid.uuid4().hex[:8]}"


async def test_a_healthy_report_copied_onto_another_route_is_ignored(
    redis: aioredis.Redis, settings: Settings
) -> None:
    prefix = own_prefix(settings)
    healthy, sick = uuid.uuid4(), uuid.uuid4()
    report = HealthReport(route_id=healthy, last_checked_at=time.time(), last_status="200", ok=True)
    await write_reports(redis, prefix, SECRET, [report])
    sealed = await redis.hget(health_key(prefix), str(healthy))
    await redis.hset(health_key(prefix), str(sick), sealed)

    found = await read_reports(redis, prefix, SECRET, [healthy, sick])
    assert list(found) == [healthy]


async def test_a_registration_copied_onto_another_proxy_is_ignored(
    redis: aioredis.Redis, settings: Settings
) -> None:
    prefix = own_prefix(settings)
    await register_proxy(redis, prefix, SECRET, "p1", "http://p1")
    await redis.hset(proxies_key(prefix), "p2", await redis.hget(proxies_key(prefix), "p1"))
    await redis.hdel(proxies_key(prefix), "p1")
    assert await proxy_urls(redis, prefix, SECRET) == []


async def test_a_table_whose_time_is_not_a_finite_recent_time_is_refused(
    redis: aioredis.Redis, settings: Settings
) -> None:
    prefix = own_prefix(settings)
    await publish_table(redis, prefix, SECRET, RoutingTable(generated_at=time.time(), routes={"d": []}))
    assert await read_table(redis, prefix, SECRET) is not None
    sealed = json.loads(await redis.get(table_key(prefix)))
    for ts in ("nan", "inf", "1e400", f"{time.time() + 3600:.3f}"):
        # Whatever the signature: the time is refused before it is checked, or it does not hold.
        await redis.set(table_key(prefix), json.dumps({**sealed, "ts": ts}))
        assert await read_table(redis, prefix, SECRET) is None
    await redis.set(table_key(prefix), json.dumps({k: v for k, v in sealed.items() if k != "nonce"}))
    assert await read_table(redis, prefix, SECRET) is None
