"""Fixtures for the app proxy: its own Redis key prefix per test, replicas, in-process proxies.

The proxy needs no database, so these settings do not depend on the session's PostgreSQL fixtures;
`redis` is redefined here on this prefix (same real Redis as every other test, from .env.services).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from sokovan.bus.routing import DeploymentEntry, HealthCheck, ProbeTarget, RoutingTable, publish_table
from sokovan.common.settings import Settings
from sokovan.proxy import AppProxy, ProxyConfig
from tests import services
from tests.proxy.backends import Backend
from tests.support import scratch_redis, stopped_after

WAIT = 10.0
StartProxy = Callable[..., Awaitable[AppProxy]]
Backends = Callable[..., Awaitable[list[Backend]]]
# Fast loops for tests; each test may override.
TEST_CONFIG = ProxyConfig(port=0, table_poll_interval=0.2, register_interval=0.2, shutdown_timeout=0.5)


@pytest.fixture
def proxy_settings() -> Settings:
    run = uuid.uuid4().hex[:8]
    return Settings(
        redis_url=services.redis_url(),
        etcd_prefix=f"sokovan-test-proxy-{run}",
        cluster_secret=f"proxy-secret-{run}",
    )


@pytest.fixture
async def redis(proxy_settings: Settings) -> AsyncIterator[aioredis.Redis]:
    async with scratch_redis(proxy_settings.redis_url, f"{proxy_settings.etcd_prefix}:*") as client:
        yield client


@pytest.fixture
async def backends() -> AsyncIterator[Backends]:
    async with stopped_after() as started:

        async def start(*names: str) -> list[Backend]:
            new = [await Backend(name).start() for name in names]
            started.extend(new)
            return new

        yield start


@pytest.fixture
async def start_proxy(proxy_settings: Settings) -> AsyncIterator[StartProxy]:
    async with stopped_after() as started:

        async def start(settings: Settings | None = None, **overrides: Any) -> AppProxy:
            proxy = AppProxy(settings or proxy_settings, replace(TEST_CONFIG, **overrides))
            await proxy.start()
            started.append(proxy)
            return proxy

        yield start


Serve = Callable[..., Awaitable[tuple[AppProxy, list[Backend]]]]
RouteApp = Callable[..., Awaitable[AppProxy]]


@pytest.fixture
def route_app(redis: aioredis.Redis, proxy_settings: Settings, start_proxy: StartProxy) -> RouteApp:
    """Starts a proxy whose applied table routes `app` to the given endpoints, in that order."""

    async def start(*endpoints: str) -> AppProxy:
        proxy = await start_proxy()
        await applied(proxy, await publish(redis, proxy_settings, {"app": list(endpoints)}))
        return proxy

    return start


@pytest.fixture
def serve(route_app: RouteApp, backends: Backends) -> Serve:
    """Starts replicas by name, then a proxy whose applied table routes `app` to all of them."""

    async def start(*names: str) -> tuple[AppProxy, list[Backend]]:
        replicas = await backends(*names)
        return await route_app(*(b.url for b in replicas)), replicas

    return start


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def target(
    endpoint: str,
    deployment: str = "app",
    *,
    route_id: uuid.UUID | None = None,
    since: float | None = None,
    **health: Any,
) -> ProbeTarget:
    check = {"interval": 0.1, "timeout": 1.0, **health}
    return ProbeTarget(
        route_id=route_id or uuid.uuid4(),
        deployment=deployment,
        endpoint=endpoint,
        health_check=HealthCheck(**check),
        since=time.time() if since is None else since,
    )


def entry(**fields: Any) -> DeploymentEntry:
    """A routing-table entry with a fresh id (open, default limits, unless told)."""
    return DeploymentEntry(id=uuid.uuid4(), **fields)


async def publish(
    redis: aioredis.Redis,
    settings: Settings,
    routes: dict[str, list[str]] | None = None,
    probes: list[ProbeTarget] | None = None,
    deployments: dict[str, DeploymentEntry] | None = None,
    generated_at: float | None = None,
) -> RoutingTable:
    table = RoutingTable(
        generated_at=time.time() if generated_at is None else generated_at,
        routes=routes or {},
        probes=probes or [],
        deployments=deployments or {},
    )
    await publish_table(redis, settings.etcd_prefix, settings.cluster_secret or "", table)
    return table


async def eventually(check: Callable[[], Awaitable[bool]], within: float = WAIT, step: float = 0.05) -> None:
    """Wait until `check()` is true (fails the test after `within` seconds)."""
    async with asyncio.timeout(within):
        while True:
            if await check():
                return
            await asyncio.sleep(step)


async def applied(proxy: AppProxy, table: RoutingTable, within: float = WAIT) -> None:
    async def check() -> bool:
        return proxy.follower.last_generated_at == table.generated_at

    await eventually(check, within)
