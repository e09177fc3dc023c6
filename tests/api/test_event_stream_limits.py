"""The `GET /v2/events` limits hold per manager, all its worker processes together: a keypair gets
16 streams from `sokovan manager --workers 2`, not 16 from each worker, and a closed stream frees its
place at once whichever worker the next one reaches. Underneath, the places are leases in Redis
(`stream_limits`): a worker that died leaves leases that run out, and Redis away is 503."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis

from sokovan.harness import ManagerProc
from sokovan.manager.api import stream_limits
from sokovan.manager.api.problems import Problem
from sokovan.manager.api.stream_limits import STREAMS_PER_KEYPAIR, StreamLimits
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api

OPENED = 20


@pytest.fixture
async def two_workers(api: Api, service_env: dict[str, str], tmp_path: Path) -> AsyncIterator[ManagerProc]:
    """A manager of two worker processes over the database `api` set up (its keypairs)."""
    manager = ManagerProc(service_env, tmp_path, args=["--workers", "2"])
    manager.start()
    try:
        await manager.wait_healthy(90)
        deadline = time.monotonic() + 90
        while manager.log_text().count("manager.started") < 2:  # /healthz answers from the first
            assert manager.failure() is None and time.monotonic() < deadline, manager.log_tail()
            await asyncio.sleep(0.1)
        yield manager
    finally:
        manager.stop()


async def _open(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str], n: int
) -> list[aiohttp.ClientResponse]:
    return list(await asyncio.gather(*(http.get(url, headers=headers) for _ in range(n))))


async def test_a_keypair_gets_sixteen_streams_from_all_the_workers_together(
    api: Api, two_workers: ManagerProc
) -> None:
    url = f"{two_workers.api}/v2/events"
    # A new connection for every request, so that the kernel shares them out between the workers.
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as http:
        responses = await _open(http, url, api.alice, OPENED)
        accepted: list[aiohttp.ClientResponse] = []
        try:
            statuses = sorted(r.status for r in responses)
            assert statuses == [200] * STREAMS_PER_KEYPAIR + [429] * (OPENED - STREAMS_PER_KEYPAIR)
            accepted = [r for r in responses if r.status == 200]
            for r in responses:
                if r.status == 429:
                    assert r.headers["Content-Type"].startswith("application/problem+json")
                    r.close()
            other = await http.get(url, headers=api.bob)  # another keypair has places of its own
            assert other.status == 200
            other.close()
            # Closed streams free their places at once, whichever worker held them and whichever
            # the new ones reach.
            for _ in range(3):
                for r in accepted[:4]:
                    r.close()
                again = await _open(http, url, api.alice, 4)
                assert [r.status for r in again] == [200] * 4
                accepted = accepted[4:] + again
            refused = await http.get(url, headers=api.alice)
            assert refused.status == 429, "a 17th stream was accepted"
            refused.close()
        finally:
            for r in responses:
                r.close()
            for r in accepted:
                r.close()
    assert two_workers.failure() is None, two_workers.failure()


# The places, underneath: two `StreamLimits` of one manager stand for two of its workers.


def _limits(ctx: ManagerContext, redis: aioredis.Redis | None = None, total: int = 100) -> StreamLimits:
    return StreamLimits(redis or ctx.redis, ctx.settings.etcd_prefix, ctx.manager_id, 2, total)


async def _refused(limits: StreamLimits, access_key: str) -> Problem:
    with pytest.raises(Problem) as caught:
        async with limits.hold(access_key):
            pass
    return caught.value


async def test_a_dead_workers_places_run_out(ctx: ManagerContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_limits, "LEASE_TTL", 1.5)
    first, second = _limits(ctx), _limits(ctx)
    assert first.key("ak").startswith(f"{ctx.settings.etcd_prefix}:")
    async with contextlib.AsyncExitStack() as held:
        for _ in range(2):
            await held.enter_async_context(first.hold("ak"))
        assert (await _refused(second, "ak")).status == 429
        for _ in range(3):  # a live worker's refreshes keep its places
            await first.refresh()
            await asyncio.sleep(0.6)
        assert (await _refused(second, "ak")).status == 429
        # The first worker dies: it refreshes no more, and never gives its places back.
        first._held.clear()
        await asyncio.sleep(1.6)
        async with second.hold("ak"):
            assert await ctx.redis.zcard(second.key("ak")) == 1


async def test_a_gone_client_on_another_worker_frees_its_place_at_once(ctx: ManagerContext) -> None:
    first, second = _limits(ctx, total=3), _limits(ctx, total=3)
    sweeper = asyncio.create_task(first.run())
    alive = {"a": True, "b": True}
    try:
        async with first.hold("ak", lambda: alive["a"]), first.hold("ak", lambda: alive["b"]):
            assert (await _refused(second, "ak")).detail.startswith("at most 2 event streams")
            async with second.hold("other"):
                total = await _refused(second, "third")
                assert "at most 3 event streams" in total.detail
            alive["a"] = False  # its connection was lost; its handler has not noticed yet
            async with second.hold("ak"):
                assert await ctx.redis.zcard(second.key()) == 2
    finally:
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
    assert await ctx.redis.zcard(first.key()) == 0, "a place was not given back"


async def test_redis_away_is_503(ctx: ManagerContext) -> None:
    away = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    try:
        problem = await _refused(_limits(ctx, away), "ak")
        assert problem.status == 503 and problem.headers == {"Retry-After": "5"}
    finally:
        await away.aclose()


async def test_the_sweeper_ends_on_its_stop_flag_without_a_cancel(ctx: ManagerContext) -> None:
    """The app's cleanup sets the flag as well as cancelling: a cancel lost as a sweep's Redis
    call ended once left the sweeper running and the cleanup waiting on it."""
    limits, stop = _limits(ctx, total=3), asyncio.Event()
    sweeper = asyncio.create_task(limits.run(stop))
    async with limits.hold("ak"):
        await asyncio.sleep(0.25)  # a few sweeps
    stop.set()
    await asyncio.wait_for(sweeper, 2)  # no cancel: the flag alone ends it
    assert sweeper.done() and not sweeper.cancelled()
