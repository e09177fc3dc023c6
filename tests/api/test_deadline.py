"""The API's deadline: a request waiting on a silent peer is a 503 within a few seconds; one that is
slow while every peer answers goes on (a busy cluster is not an outage)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from sokovan.manager.api.auth import CTX_KEY
from sokovan.manager.api.deadline import FIRST_LOOK, REQUEST_DEADLINE, deadline_middleware
from sokovan.manager.api.unavailable import unavailable_middleware
from sokovan.manager.peer_watch import SILENT_AFTER, PeerWatch

SLOW = max(FIRST_LOOK, REQUEST_DEADLINE) + 1.0  # past both


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _client(peers: PeerWatch | None) -> TestClient:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(SLOW)
        return web.json_response({"done": True})

    app = web.Application(middlewares=[unavailable_middleware, deadline_middleware])
    app[CTX_KEY] = SimpleNamespace(peers=peers)  # type: ignore[misc]
    app.router.add_get("/slow", slow)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


async def test_slow_with_every_peer_answering_goes_on() -> None:
    clock = Clock()
    client = await _client(PeerWatch({"postgres": asyncio.sleep}, clock=clock))
    try:
        resp = await client.get("/slow")
        assert resp.status == 200, await resp.text()
    finally:
        await client.close()


async def test_waiting_on_a_silent_peer_is_a_503_soon() -> None:
    clock = Clock()
    watch = PeerWatch({"postgres": asyncio.sleep}, clock=clock)
    clock.now = SILENT_AFTER + 1  # no probe has answered since
    client = await _client(watch)
    try:
        began = time.monotonic()
        resp = await client.get("/slow")
        took = time.monotonic() - began
        assert resp.status == 503 and resp.headers["Content-Type"].startswith("application/problem+json")
        assert FIRST_LOOK - 0.1 < took < FIRST_LOOK + 1.0, took
    finally:
        await client.close()


async def test_without_a_watch_the_clock_decides() -> None:
    client = await _client(None)
    try:
        began = time.monotonic()
        resp = await client.get("/slow")
        assert resp.status == 503
        assert time.monotonic() - began < max(SLOW, REQUEST_DEADLINE) + 1.0
    finally:
        await client.close()
