"""The proxy's load report (what the autoscaler and the drain read) and scale from zero."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import redis.asyncio as aioredis

from sokovan.bus.proxy_load import ClusterLoad, read_loads
from sokovan.common.settings import Settings
from tests.proxy.conftest import Backends, StartProxy, applied, entry, eventually, publish


async def loads(redis: aioredis.Redis, settings: Settings) -> ClusterLoad:
    return await read_loads(redis, settings.etcd_prefix, settings.cluster_secret or "")


async def test_the_load_report_shows_inflight_rps_and_endpoints(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    (replica,) = await backends("r1")
    proxy = await start_proxy(load_interval=0.2)
    app, quiet = entry(), entry()
    table = await publish(
        redis, proxy_settings, {"app": [replica.url]}, deployments={"app": app, "quiet": quiet}
    )
    await applied(proxy, table)
    for _ in range(10):
        async with client.get(f"{proxy.url}/app/whoami") as resp:
            assert resp.status == 200
    async with client.get(f"{proxy.url}/app/stream") as held:
        assert await asyncio.wait_for(held.content.readuntil(b"\n\n"), 5) == b"data: first\n\n"
        seen = ClusterLoad()

        async def reported() -> bool:
            nonlocal seen
            seen = await loads(redis, proxy_settings)
            dep = seen.deployments.get(app.id)
            return dep is not None and dep.inflight == 1 and seen.endpoints.get(replica.url) == 1

        await eventually(reported)
        assert seen.proxies == 1
        assert seen.oldest_table == table.generated_at  # measured under the table in force
        assert seen.deployments[app.id].waiting == 0
        assert 1.0 <= seen.deployments[app.id].rps <= 11 / 5 + 0.01  # 11 requests over about 5 s
        assert seen.deployments[quiet.id].inflight == 0 and seen.deployments[quiet.id].rps == 0
        replica.release_stream.set()
        await held.read()

    async def drained() -> bool:
        now = await loads(redis, proxy_settings)
        return now.deployments[app.id].inflight == 0 and now.endpoints == {}

    await eventually(drained)
    await proxy.stop()
    assert (await loads(redis, proxy_settings)).proxies == 0  # forgotten at stop


async def test_a_request_for_a_deployment_at_zero_waits_for_its_replica(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    (replica,) = await backends("r1")
    proxy = await start_proxy(load_interval=30)  # only the immediate write can show the waiting request
    app = entry(autoscaled=True, activation_timeout=20)
    await applied(proxy, await publish(redis, proxy_settings, {}, deployments={"app": app}))

    async def call() -> tuple[int, str]:
        async with client.get(f"{proxy.url}/app/whoami") as resp:
            return resp.status, await resp.text()

    held = asyncio.create_task(call())

    async def waiting() -> bool:
        dep = (await loads(redis, proxy_settings)).deployments.get(app.id)
        return dep is not None and dep.waiting == 1

    await eventually(waiting, within=5)
    assert not held.done()
    # A table still without a replica changes nothing; one with a replica answers the request.
    await applied(proxy, await publish(redis, proxy_settings, {"app": []}, deployments={"app": app}))
    await asyncio.sleep(0.2)
    assert not held.done()
    started = time.monotonic()
    await publish(redis, proxy_settings, {"app": [replica.url]}, deployments={"app": app})
    assert await asyncio.wait_for(held, 10) == (200, "r1")
    assert time.monotonic() - started < 5
    assert proxy.load.snapshot("p").deployments[app.id].waiting == 0


async def test_no_replica_within_the_activation_timeout_is_503(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    client: aiohttp.ClientSession,
) -> None:
    proxy = await start_proxy()
    scaled, fixed = entry(autoscaled=True, activation_timeout=0.5), entry()
    await applied(
        proxy, await publish(redis, proxy_settings, {}, deployments={"scaled": scaled, "fixed": fixed})
    )
    for name, least in (("scaled", 0.4), ("fixed", 0.0)):
        started = time.monotonic()
        async with client.get(f"{proxy.url}/{name}/whoami") as resp:
            assert resp.status == 503
            assert resp.content_type == "application/problem+json"
            assert (await resp.json())["title"] == "No healthy replica"
        assert least <= time.monotonic() - started < 5
    assert proxy.load.snapshot("p").deployments[scaled.id].waiting == 0
