"""Forwarding through an in-process proxy to real replicas: round robin, retries, errors, streaming."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import AsyncIterator

import aiohttp
import pytest
import redis.asyncio as aioredis
from yarl import URL

from sokovan.common.settings import Settings
from sokovan.proxy.forward import _dropped
from tests.proxy.backends import Resetter, dead_endpoint
from tests.proxy.conftest import (
    Backends,
    RouteApp,
    Serve,
    StartProxy,
    applied,
    entry,
    eventually,
    publish,
    target,
)


async def test_round_robin_across_three_replicas(serve: Serve, client: aiohttp.ClientSession) -> None:
    proxy, _ = await serve("r1", "r2", "r3")
    answers = []
    for _ in range(9):
        async with client.get(f"{proxy.url}/app/whoami") as resp:
            assert resp.status == 200
            answers.append(await resp.text())
    assert sorted(answers) == ["r1"] * 3 + ["r2"] * 3 + ["r3"] * 3
    assert answers[:3] == answers[3:6] == answers[6:]  # a fixed rotation, not a random spread


async def test_method_path_query_headers_and_body_cross(serve: Serve, client: aiohttp.ClientSession) -> None:
    proxy, (replica,) = await serve("r1")

    async def body() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield b"x" * 65536

    headers = {"X-Custom": "yes", "Connection": "keep-alive, X-Hop", "X-Hop": "drop me"}
    url = URL(f"{proxy.url}/app/echo/a%20b/c?x=1&y=%2F&status=201", encoded=True)
    async with client.put(url, data=body(), headers=headers) as resp:
        assert resp.status == 201
        assert resp.headers.getall("Set-Cookie") == ["a=1", "b=2"]
        seen = await resp.json()
    assert seen["method"] == "PUT"
    assert seen["path"] == "/echo/a%20b/c"
    assert seen["query"] == "x=1&y=%2F&status=201"
    assert seen["body_length"] == 64 * 65536
    sent = {k.lower(): v for k, v in seen["headers"].items()}
    assert sent["x-custom"] == "yes"
    assert "x-hop" not in sent
    assert sent["x-forwarded-for"] == "127.0.0.1"
    assert sent["x-forwarded-host"] == proxy.url.removeprefix("http://")
    assert sent["x-forwarded-proto"] == "http"
    assert sent["x-forwarded-prefix"] == "/app"
    assert sent["host"] == replica.url.removeprefix("http://")

    async with client.head(f"{proxy.url}/app/whoami") as resp:
        assert resp.status == 200
        assert resp.headers["X-Backend"] == "r1"


async def test_a_refused_connection_goes_to_the_next_replica(
    route_app: RouteApp, backends: Backends, client: aiohttp.ClientSession
) -> None:
    r1, r2 = await backends("r1", "r2")
    proxy = await route_app(dead_endpoint(), r1.url, r2.url)
    for _ in range(6):
        async with client.post(f"{proxy.url}/app/echo/x", data=b"payload") as resp:
            assert resp.status == 200
            assert (await resp.json())["body_head"] == "payload"
    assert r1.hits + r2.hits == 6
    assert r1.hits >= 2 and r2.hits >= 2


async def test_no_healthy_replica_is_503(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    client: aiohttp.ClientSession,
) -> None:
    proxy = await start_proxy()
    table = await publish(
        redis,
        proxy_settings,
        {"down": [dead_endpoint(), dead_endpoint()]},
        [target(dead_endpoint(), "starting", interval=60)],
    )
    await applied(proxy, table)
    for name in ("starting", "down"):
        async with client.get(f"{proxy.url}/{name}/x") as resp:
            assert resp.status == 503
            assert resp.content_type == "application/problem+json"
            problem = await resp.json()
        assert problem["status"] == 503
        assert problem["title"] == "No healthy replica"
        assert set(problem) == {"type", "title", "status", "detail"}
        assert name in problem["detail"]


async def test_unknown_deployment_is_404(route_app: RouteApp, client: aiohttp.ClientSession) -> None:
    proxy = await route_app(dead_endpoint())
    for path in ("/nope/x", "/nope", "/"):
        async with client.get(f"{proxy.url}{path}") as resp:
            assert resp.status == 404
            assert resp.content_type == "application/problem+json"
            assert (await resp.json())["status"] == 404


async def test_a_chunked_response_streams_as_it_is_written(
    serve: Serve, client: aiohttp.ClientSession
) -> None:
    proxy, (replica,) = await serve("r1")
    async with client.get(f"{proxy.url}/app/stream") as resp:
        assert resp.status == 200
        assert resp.content_type == "text/event-stream"
        # The replica holds the second event back until told: the first must arrive on its own.
        first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5)
        assert first == b"data: first\n\n"
        replica.release_stream.set()
        assert await asyncio.wait_for(resp.content.read(), 5) == b"data: second\n\n"


async def test_a_client_leaving_an_idle_stream_closes_the_replica_connection(
    serve: Serve, client: aiohttp.ClientSession
) -> None:
    proxy, (replica,) = await serve("r1")
    resp = await client.get(f"{proxy.url}/app/stream")
    assert await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5) == b"data: first\n\n"
    resp.close()  # drop the connection while the replica has nothing to send
    await asyncio.wait_for(replica.stream_abandoned.wait(), 5)


async def test_a_replica_breaking_off_mid_response_is_visible(
    serve: Serve, client: aiohttp.ClientSession
) -> None:
    proxy, _ = await serve("r1")
    # Streamed (no length): the client gets the replica's status, then sees the truncation.
    async with client.get(f"{proxy.url}/app/broken-stream") as resp:
        assert resp.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
    # A small answer of known length is read whole before anything is sent: a replica that
    # breaks it off is a 502.
    async with client.get(f"{proxy.url}/app/broken") as resp:
        assert resp.status == 502
        assert resp.headers["Content-Type"].startswith("application/problem+json")


async def test_a_replica_whose_own_probe_fails_is_skipped(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    good, sick = await backends("good", "sick")
    sick.health_status = 503
    proxy = await start_proxy()
    # The table still lists both (the manager has not judged yet); the proxy's own probe knows better.
    table = await publish(
        redis, proxy_settings, {"app": [good.url, sick.url]}, [target(good.url), target(sick.url)]
    )
    await applied(proxy, table)

    async def sick_probed() -> bool:
        return sick.url in proxy.balancer.failing

    await eventually(sick_probed)
    for _ in range(4):
        async with client.get(f"{proxy.url}/app/whoami") as resp:
            assert await resp.text() == "good"
    # With every replica failing its probe, traffic still goes somewhere rather than nowhere.
    good.health_status = 500

    async def both_failing() -> bool:
        return {good.url, sick.url} <= proxy.balancer.failing

    await eventually(both_failing)
    seen = set()
    for _ in range(4):
        async with client.get(f"{proxy.url}/app/whoami") as resp:
            seen.add(await resp.text())
    assert seen == {"good", "sick"}


async def test_healthz_and_metrics(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    r1, r2 = await backends("r1", "r2")
    proxy = await start_proxy()
    async with client.get(f"{proxy.url}/healthz") as resp:
        assert resp.status == 200
        assert (await resp.json())["routes"] == 0
    app = entry()
    table = await publish(
        redis, proxy_settings, {"app": [r1.url, r2.url]}, [target(r1.url)], deployments={"app": app}
    )
    await applied(proxy, table)
    async with client.get(f"{proxy.url}/healthz") as resp:
        health = await resp.json()
    assert health["ok"] is True
    assert health["routes"] == 2
    assert health["probes"] == 1
    async with client.get(f"{proxy.url}/app/whoami") as resp:
        assert resp.status == 200
    text = ""

    async def probe_counted() -> bool:
        nonlocal text
        async with client.get(f"{proxy.url}/metrics") as resp:
            text = await resp.text()
        return f'sokovan_proxy_probes_total{{deployment="{app.id}",result="pass"}}' in text

    await eventually(probe_counted)
    # Deployments are labelled by id, never by name (test_guard: names without an entry).
    assert f'sokovan_proxy_requests_total{{deployment="{app.id}",outcome="forwarded"}}' in text
    assert 'deployment="app"' not in text


async def test_an_endpoint_with_a_path_prefix_like_a_hollow_kernel(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    (fleet,) = await backends("fleet")
    endpoint = f"{fleet.url}/echo/kernels/k1"  # like http://host:port/kernels/<kernel_id>
    route = target(endpoint)
    proxy = await start_proxy()
    await applied(proxy, await publish(redis, proxy_settings, {"app": [endpoint]}, [route]))
    async with client.get(f"{proxy.url}/app/v1/models?a=b") as resp:
        seen = await resp.json()
    assert (seen["path"], seen["query"]) == ("/echo/kernels/k1/v1/models", "a=b")
    async with client.get(f"{proxy.url}/app") as resp:
        assert (await resp.json())["path"] == "/echo/kernels/k1/"

    async def probed() -> bool:
        counts = proxy.prober.counts(route.route_id)
        return counts is not None and counts.successes >= 1

    await eventually(probed)


async def test_a_reset_connection_sends_a_bodiless_idempotent_request_to_the_next_replica(
    route_app: RouteApp, backends: Backends, client: aiohttp.ClientSession
) -> None:
    """A replica killed while the request sat unread in its socket resets the connection: a GET goes
    on to the next replica; a POST, whose body the replica may have acted on, is a 502."""
    (r1,) = await backends("r1")
    killed = await Resetter().start()
    try:
        proxy = await route_app(killed.url, r1.url)
        for _ in range(4):
            async with client.get(f"{proxy.url}/app/whoami") as resp:
                assert resp.status == 200
                assert await resp.text() == "r1"
        assert killed.resets >= 1
        statuses = []
        for _ in range(4):
            async with client.post(f"{proxy.url}/app/echo/x", data=b"payload") as resp:
                statuses.append(resp.status)
        assert 502 in statuses and set(statuses) <= {200, 502}
    finally:
        await killed.stop()


@pytest.mark.parametrize(
    ("exc", "dropped"),
    [
        (aiohttp.ServerDisconnectedError(), True),
        (aiohttp.ClientOSError(errno.ECONNRESET, "Connection reset by peer"), True),
        (aiohttp.ClientOSError(errno.EPIPE, "Broken pipe"), True),
        # A request written to a pooled connection the killed replica had already closed.
        (aiohttp.ClientConnectionResetError("Cannot write to closing transport"), True),
        (aiohttp.ClientOSError(errno.EHOSTUNREACH, "No route to host"), False),
        (aiohttp.ClientPayloadError("Response payload is not completed"), False),
    ],
)
def test_which_failures_are_a_connection_dropped_before_any_answer(
    exc: aiohttp.ClientError, dropped: bool
) -> None:
    """A bodiless idempotent request goes on to the next replica after these (see the tests above)."""
    assert _dropped(exc) is dropped
