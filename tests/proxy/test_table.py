"""Following the routing table: announcements, the periodic re-read, and tables that do not verify."""

from __future__ import annotations

import json
import time

import aiohttp
import redis.asyncio as aioredis

from sokovan.bus.routing import RoutingTable, publish_table, table_channel, table_key
from sokovan.common.settings import Settings
from sokovan.proxy import AppProxy
from tests.proxy.conftest import Backends, StartProxy, applied, eventually, publish


async def whoami(client: aiohttp.ClientSession, proxy: AppProxy, name: str = "app") -> str:
    async with client.get(f"{proxy.url}/{name}/whoami") as resp:
        return await resp.text() if resp.status == 200 else str(resp.status)


async def test_a_change_is_followed_on_its_announcement(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    r1, r2 = await backends("r1", "r2")
    proxy = await start_proxy(table_poll_interval=30)  # only the announcement can bring the change in time
    await applied(proxy, await publish(redis, proxy_settings, {"app": [r1.url]}))
    assert await whoami(client, proxy) == "r1"
    started = time.monotonic()
    await applied(proxy, await publish(redis, proxy_settings, {"app": [r2.url]}), within=5)
    assert time.monotonic() - started < 5
    assert await whoami(client, proxy) == "r2"


async def test_a_change_without_announcement_is_read_within_the_poll_interval(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    (r1,) = await backends("r1")
    proxy = await start_proxy(table_poll_interval=0.3)
    # Sign the table under another prefix, then copy the value in place without an announcement.
    other = f"{proxy_settings.etcd_prefix}:elsewhere"
    table = RoutingTable(generated_at=time.time(), routes={"app": [r1.url]})
    await publish_table(redis, other, proxy_settings.cluster_secret or "", table)
    await redis.set(table_key(proxy_settings.etcd_prefix), await redis.get(table_key(other)) or b"")
    await applied(proxy, table, within=3)
    assert await whoami(client, proxy) == "r1"


async def test_forged_and_unsigned_tables_are_ignored(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    good, evil = await backends("good", "evil")
    proxy = await start_proxy()
    genuine = await publish(redis, proxy_settings, {"app": [good.url]})
    await applied(proxy, genuine)
    key, channel = table_key(proxy_settings.etcd_prefix), table_channel(proxy_settings.etcd_prefix)
    reads_before = proxy.follower.reads
    forged = RoutingTable(generated_at=time.time(), routes={"app": [evil.url], "evil": [evil.url]})
    # Signed with the wrong secret.
    await publish_table(redis, proxy_settings.etcd_prefix, "not-the-secret", forged)
    # Unsigned, in the sealed shape and bare.
    body = forged.model_dump_json()
    for raw in (json.dumps({"body": body, "sig": "0" * 64}), json.dumps({"body": body}), body, "garbage"):
        await redis.set(key, raw)
        await redis.publish(channel, "forged")

    async def reread_a_few_times() -> bool:
        return proxy.follower.reads >= reads_before + 5

    await eventually(reread_a_few_times)
    assert proxy.follower.last_generated_at == genuine.generated_at
    for _ in range(3):
        assert await whoami(client, proxy) == "good"
    assert await whoami(client, proxy, "evil") == "404"
    assert evil.hits == 0
    # A genuine table is taken again afterwards.
    await applied(proxy, await publish(redis, proxy_settings, {"app": [good.url], "other": [good.url]}))
    assert await whoami(client, proxy, "other") == "good"


async def test_no_table_yet_is_503(
    start_proxy: StartProxy,
    client: aiohttp.ClientSession,
) -> None:
    proxy = await start_proxy()
    async with client.get(f"{proxy.url}/app/x") as resp:
        assert resp.status == 503
        assert resp.content_type == "application/problem+json"


async def test_a_table_older_than_the_one_in_force_is_ignored(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    new, old = await backends("new", "old")
    proxy = await start_proxy()
    current = await publish(redis, proxy_settings, {"app": [new.url]})
    await applied(proxy, current)
    reads_before = proxy.follower.reads
    await publish(redis, proxy_settings, {"app": [old.url]}, generated_at=current.generated_at - 10)

    async def reread_a_few_times() -> bool:
        return proxy.follower.reads >= reads_before + 3

    await eventually(reread_a_few_times)
    assert proxy.follower.last_generated_at == current.generated_at
    assert await whoami(client, proxy) == "new"
    assert old.hits == 0
    # The same table again is fine (re-reads), and so is a newer one.
    await publish(redis, proxy_settings, {"app": [new.url]}, generated_at=current.generated_at)
    await applied(proxy, await publish(redis, proxy_settings, {"app": [old.url]}))
    assert await whoami(client, proxy) == "old"
