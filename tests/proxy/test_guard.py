"""The proxy's guard: a deployment's access token, its in-flight limits, and metrics without names."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import aiohttp
import redis.asyncio as aioredis

from sokovan.bus.routing import DeploymentEntry
from sokovan.common.settings import Settings
from sokovan.proxy import AppProxy
from tests.proxy.backends import Backend
from tests.proxy.conftest import Backends, StartProxy, applied, entry, eventually, publish

TOKEN = "tok-3f9a1c"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def routed(
    redis: aioredis.Redis,
    settings: Settings,
    proxy: AppProxy,
    routes: dict[str, list[str]],
    deployments: dict[str, DeploymentEntry],
) -> None:
    await applied(proxy, await publish(redis, settings, routes, deployments=deployments))


@asynccontextmanager
async def held_stream(client: aiohttp.ClientSession, url: str) -> AsyncIterator[aiohttp.ClientResponse]:
    """A request the replica keeps in flight (its /stream) until the test releases it."""
    async with client.get(url) as resp:
        assert resp.status == 200, await resp.text()
        assert await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5) == b"data: first\n\n"
        yield resp


async def test_a_token_is_needed_and_never_reaches_the_replica(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    (replica,) = await backends("r1")
    proxy = await start_proxy()
    await routed(
        redis,
        proxy_settings,
        proxy,
        {"app": [replica.url], "open": [replica.url]},
        {"app": entry(token_sha256=digest(TOKEN)), "open": entry()},
    )
    wrong = [
        {},
        {"Authorization": "Bearer not-the-token"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": "Bearer "},
        {"Authorization": f"Bearer {TOKEN}x"},
    ]
    for headers in wrong:
        async with client.post(f"{proxy.url}/app/echo/x", data=b"payload", headers=headers) as resp:
            assert resp.status == 401, headers
            assert resp.headers["WWW-Authenticate"] == "Bearer"
            assert resp.content_type == "application/problem+json"
            assert (await resp.json())["status"] == 401
    assert replica.hits == 0

    for scheme in ("Bearer", "bearer"):
        headers = {"Authorization": f"{scheme} {TOKEN}", "X-Other": "kept"}
        async with client.post(f"{proxy.url}/app/echo/x", data=b"payload", headers=headers) as resp:
            assert resp.status == 200
            seen = {k.lower(): v for k, v in (await resp.json())["headers"].items()}
        assert "authorization" not in seen
        assert seen["x-other"] == "kept"
    # An open deployment needs none; a header sent to it does not cross either.
    async with client.get(f"{proxy.url}/open/echo/y", headers={"Authorization": "Bearer mine"}) as resp:
        assert resp.status == 200
        assert "authorization" not in {k.lower() for k in (await resp.json())["headers"]}
    # An unknown name is still 404, token or not.
    async with client.get(f"{proxy.url}/nope/x", headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
        assert resp.status == 404


async def test_a_new_token_replaces_the_old_one(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    (replica,) = await backends("r1")
    proxy = await start_proxy()
    app = entry(token_sha256=digest("old"))
    await routed(redis, proxy_settings, proxy, {"app": [replica.url]}, {"app": app})
    async with client.get(f"{proxy.url}/app/whoami", headers={"Authorization": "Bearer old"}) as resp:
        assert resp.status == 200
    rotated = app.model_copy(update={"token_sha256": digest("new")})
    await routed(redis, proxy_settings, proxy, {"app": [replica.url]}, {"app": rotated})
    async with client.get(f"{proxy.url}/app/whoami", headers={"Authorization": "Bearer old"}) as resp:
        assert resp.status == 401
    async with client.get(f"{proxy.url}/app/whoami", headers={"Authorization": "Bearer new"}) as resp:
        assert resp.status == 200


async def expect_429(client: aiohttp.ClientSession, url: str) -> None:
    async with client.get(url) as resp:
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "1"
        assert resp.content_type == "application/problem+json"
        assert (await resp.json())["status"] == 429


async def test_past_the_deployment_limit_is_429(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    (replica,) = await backends("r1")
    proxy = await start_proxy(max_per_client=10)
    app = entry(max_connections=2)
    await routed(
        redis,
        proxy_settings,
        proxy,
        {"app": [replica.url], "other": [replica.url]},
        {"app": app, "other": entry()},
    )
    async with AsyncExitStack() as held:
        for _ in range(2):
            await held.enter_async_context(held_stream(client, f"{proxy.url}/app/stream"))
        assert proxy.limits.inflight(str(app.id)) == 2
        await expect_429(client, f"{proxy.url}/app/whoami")
        async with client.get(f"{proxy.url}/other/whoami") as resp:  # another deployment is not held up
            assert resp.status == 200
        replica.release_stream.set()

    async def freed() -> bool:
        return proxy.limits.inflight(str(app.id)) == 0

    await eventually(freed)
    async with client.get(f"{proxy.url}/app/whoami") as resp:
        assert resp.status == 200


async def test_past_the_per_client_limit_is_429_per_deployment(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    (replica,) = await backends("r1")
    proxy = await start_proxy(max_per_client=2)
    # An older table's name without an entry gets the default limits, the per-client one included.
    await routed(
        redis,
        proxy_settings,
        proxy,
        {"a": [replica.url], "b": [replica.url], "legacy": [replica.url]},
        {"a": entry(max_connections=100), "b": entry(max_connections=100)},
    )
    async with AsyncExitStack() as held:
        for name in ("a", "a", "legacy", "legacy"):
            await held.enter_async_context(held_stream(client, f"{proxy.url}/{name}/stream"))
        await expect_429(client, f"{proxy.url}/a/whoami")
        await expect_429(client, f"{proxy.url}/legacy/whoami")
        # The same client's calls to another deployment are counted apart.
        for _ in range(2):
            async with client.get(f"{proxy.url}/b/whoami") as resp:
                assert resp.status == 200
        replica.release_stream.set()


async def test_metrics_label_deployments_by_id_only(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    replica: Backend
    (replica,) = await backends("r1")
    proxy = await start_proxy()
    secret_app = entry(token_sha256=digest(TOKEN))
    await routed(
        redis,
        proxy_settings,
        proxy,
        {"payroll-model": [replica.url], "legacy-name": [replica.url]},
        {"payroll-model": secret_app},
    )
    for path in ("/payroll-model/whoami", "/legacy-name/whoami", "/nope-name/x"):
        async with client.get(f"{proxy.url}{path}") as resp:
            await resp.read()
    async with client.get(f"{proxy.url}/metrics") as resp:
        text = await resp.text()
    assert f'deployment="{secret_app.id}",outcome="unauthorized"' in text
    assert 'deployment="(unknown)",outcome="forwarded"' in text  # the name without an entry
    assert 'deployment="(unknown)",outcome="unknown_deployment"' in text
    for name in ("payroll-model", "legacy-name", "nope-name"):
        assert name not in text
