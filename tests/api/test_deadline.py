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


async def _never_answers() -> None:
    await asyncio.sleep(3600)


async def test_waiting_on_a_silent_peer_is_a_503_soon() -> None:
    watch = PeerWatch({"postgres": _never_answers})
    stop = asyncio.Event()
    probing = asyncio.create_task(watch.run(stop))
    client = await _client(watch)
    try:
        began = time.monotonic()
        resp = await client.get("/slow")
        took = time.monotonic() - began
        assert resp.status == 503 and resp.headers["Content-Type"].startswith("application/problem+json")
        assert FIRST_LOOK - 0.1 < took < FIRST_LOOK + 1.0, took
    finally:
        await client.close()
        stop.set()
        await probing


async def test_an_idle_watch_counts_no_silence_from_before_it_was_wanted() -> None:
    """Probed only slowly while nothing waits, a peer last heard from long ago is not silent the
    moment a request wants the watch; it is once the fast probes have not reached it for long."""
    clock = Clock()
    watch = PeerWatch({"postgres": _never_answers}, clock=clock)
    clock.now = 60.0  # idle for a minute: the last answer is old, but nothing wanted the watch
    watch.want()
    assert watch.fast() and watch.silent() == []
    clock.now += SILENT_AFTER + 0.1
    watch.want()
    assert watch.silent() == ["postgres"]
    clock.now += 60.0  # no want since: back to the idle pace
    assert not watch.fast()


async def test_without_a_watch_the_clock_decides() -> None:
    client = await _client(None)
    try:
        began = time.monotonic()
        resp = await client.get("/slow")
        assert resp.status == 503
        assert time.monotonic() - began < max(SLOW, REQUEST_DEADLINE) + 1.0
    finally:
        await client.close()
