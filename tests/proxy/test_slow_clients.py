"""Slow clients are cut off (headers, body), and a deployment flooded with slow uploads starves no other."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import aiohttp
import redis.asyncio as aioredis
from yarl import URL

from sokovan.common.settings import Settings
from sokovan.proxy import AppProxy
from tests.proxy.conftest import Backends, StartProxy, applied, entry, eventually, publish

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(proxy: AppProxy) -> Conn:
    url = URL(proxy.url)
    assert url.host is not None and url.port is not None
    return await asyncio.open_connection(url.host, url.port)


@contextlib.asynccontextmanager
async def connections(proxy: AppProxy, n: int) -> AsyncIterator[list[Conn]]:
    opened = [await connect(proxy) for _ in range(n)]
    try:
        yield opened
    finally:
        for _, writer in opened:
            writer.close()


async def closed_by_proxy(reader: asyncio.StreamReader, within: float = 10.0) -> bytes:
    """Everything the proxy sent before closing the connection (fails if it stays open)."""
    data = b""
    async with asyncio.timeout(within):
        while True:
            try:
                chunk = await reader.read(65536)
            except ConnectionResetError:
                return data
            if not chunk:
                return data
            data += chunk


async def test_a_client_slow_with_its_headers_is_cut_off(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
) -> None:
    (replica,) = await backends("r1")
    proxy = await start_proxy(header_timeout=0.5)
    await applied(proxy, await publish(redis, proxy_settings, {"app": [replica.url]}))

    # Says nothing at all.
    silent_reader, silent = await connect(proxy)
    # Trickles its headers, a line every 0.1 s, never ending them.
    reader, writer = await connect(proxy)
    writer.write(b"GET /app/whoami HTTP/1.1\r\nHost: x\r\n")
    started = time.monotonic()

    async def trickle() -> None:
        for i in range(100):
            writer.write(f"X-Slow-{i}: 1\r\n".encode())
            await asyncio.sleep(0.1)

    dripping = asyncio.create_task(trickle())
    try:
        assert await closed_by_proxy(reader) == b""
        assert await closed_by_proxy(silent_reader) == b""
        assert time.monotonic() - started < 8
    finally:
        dripping.cancel()
        writer.close()
        silent.close()
    assert replica.hits == 0

    # A kept-alive connection gets the same time for each next request's headers.
    reader, writer = await connect(proxy)
    try:
        writer.write(b"GET /app/whoami HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200")
        assert await asyncio.wait_for(reader.readexactly(2), 5) == b"r1"
        await asyncio.sleep(0.8)  # idle between requests is not the header timeout's business
        writer.write(b"GET /app/whoami HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200")
        assert await asyncio.wait_for(reader.readexactly(2), 5) == b"r1"
        writer.write(b"GET /app/whoami HTTP/1.1\r\n")  # a third request, whose headers never end
        assert await closed_by_proxy(reader) == b""
    finally:
        writer.close()
    assert replica.hits == 2


async def test_a_request_body_without_a_byte_for_too_long_is_cut_off(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    (replica,) = await backends("r1")
    proxy = await start_proxy(body_timeout=0.5)
    app = entry()
    await applied(
        proxy, await publish(redis, proxy_settings, {"app": [replica.url]}, deployments={"app": app})
    )
    reader, writer = await connect(proxy)
    try:
        writer.write(b"POST /app/echo/x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"y" * 10)
        # The request reaches the replica, which reads the body...

        async def forwarded() -> bool:
            return replica.hits == 1

        await eventually(forwarded)
        # ...then the client stalls: its connection is closed, with the replica's.
        assert await closed_by_proxy(reader) == b""
    finally:
        writer.close()

    async def released() -> bool:
        return proxy.limits.inflight(str(app.id)) == 0 and proxy.load.snapshot("p").endpoints == {}

    await eventually(released)
    # A body that keeps coming, however slowly, is fine.

    async def slow_body() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield b"z" * 10
            await asyncio.sleep(0.2)

    async with client.post(f"{proxy.url}/app/echo/x", data=slow_body()) as resp:
        assert resp.status == 200
        assert (await resp.json())["body_length"] == 40


async def test_slow_uploads_to_one_deployment_leave_another_answering(
    redis: aioredis.Redis,
    proxy_settings: Settings,
    start_proxy: StartProxy,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    """The contract's 1,000 slow uploads, scaled down: the flooded deployment takes its cap and
    answers the rest 429; the other deployment answers as before."""
    slow_replica, fast_replica = await backends("slow", "fast")
    proxy = await start_proxy(max_per_client=1000)
    slow = entry(max_connections=40)
    await applied(
        proxy,
        await publish(
            redis,
            proxy_settings,
            {"slow": [slow_replica.url], "fast": [fast_replica.url]},
            deployments={"slow": slow, "fast": entry()},
        ),
    )
    async with connections(proxy, 60) as uploads:
        for _, writer in uploads:
            writer.write(
                b"POST /slow/echo/up HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + b"u" * 100
            )

        async def flooded() -> bool:
            return proxy.limits.inflight(str(slow.id)) == 40 and slow_replica.hits == 40

        await eventually(flooded)
        for _ in range(5):
            started = time.monotonic()
            async with client.get(f"{proxy.url}/fast/whoami") as resp:
                assert resp.status == 200
                assert await resp.text() == "fast"
            assert time.monotonic() - started < 2

        async def head(reader: asyncio.StreamReader) -> bytes:
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(reader.read(12), 1.0)
            return b""

        heads = await asyncio.gather(*(head(reader) for reader, _ in uploads))
        assert heads.count(b"HTTP/1.1 429") == 20
        assert heads.count(b"") == 40  # the others are still uploading
