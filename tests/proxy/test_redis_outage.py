"""A Redis outage: the proxy keeps forwarding with the last table, and carries on when Redis returns.

Uses a private `redis-server` started (and stopped) by the test, so the shared one is never touched.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from sokovan.bus.routing import proxy_urls, read_reports
from sokovan.common.settings import Settings
from sokovan.harness import free_port
from tests.proxy.conftest import Backends, StartProxy, applied, eventually, publish, target

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")


class PrivateRedis:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self._proc = await asyncio.create_subprocess_exec(
            "redis-server", *args, stdout=asyncio.subprocess.DEVNULL
        )
        client = aioredis.Redis.from_url(self.url)
        try:
            async with asyncio.timeout(10):
                while True:
                    try:
                        await client.ping()
                        return
                    except (RedisError, OSError):
                        await asyncio.sleep(0.05)
        finally:
            await client.aclose()

    async def stop(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()  # only the server this test started
            await asyncio.wait_for(self._proc.wait(), 10)
        self._proc = None


@pytest.fixture
async def private_redis() -> AsyncIterator[PrivateRedis]:
    server = PrivateRedis()
    await server.start()
    yield server
    await server.stop()


async def test_forwarding_rides_out_a_redis_outage(
    private_redis: PrivateRedis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    settings = proxy_settings.model_copy(update={"redis_url": private_redis.url})
    secret, prefix = settings.cluster_secret or "", settings.etcd_prefix
    r1, r2 = await backends("r1", "r2")
    proxy = await start_proxy(settings)
    redis = aioredis.Redis.from_url(private_redis.url)
    try:
        await applied(proxy, await publish(redis, settings, {"app": [r1.url]}, [target(r1.url)]))
        await private_redis.stop()
        await redis.aclose()
        until = time.monotonic() + 2.0
        while time.monotonic() < until:
            async with client.get(f"{proxy.url}/app/whoami") as resp:
                assert resp.status == 200 and await resp.text() == "r1"
            await asyncio.sleep(0.1)
        async with client.get(f"{proxy.url}/healthz") as resp:
            assert resp.status == 200 and (await resp.json())["routes"] == 1

        await private_redis.start()  # empty: the proxy must re-register and write again
        redis = aioredis.Redis.from_url(private_redis.url)
        moved = target(r2.url)
        await applied(proxy, await publish(redis, settings, {"app": [r2.url]}, [moved]), within=15)
        async with client.get(f"{proxy.url}/app/whoami") as resp:
            assert await resp.text() == "r2"

        async def carried_on() -> bool:
            reports = await read_reports(redis, prefix, secret, [moved.route_id])
            return bool(reports) and proxy.url in await proxy_urls(redis, prefix, secret)

        await eventually(carried_on, within=15)
    finally:
        await redis.aclose()
