"""`GET /v2/events` limits: one Redis subscription per manager for every stream, 16 streams per
keypair and `max_event_streams` per manager (429 past them, freed when a stream closes); a slow
listener is ended rather than buffered without bound; a lost subscription ends the streams and
the hub subscribes again for the next ones."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer

from sokovan.bus import user_event_hub
from sokovan.bus.user_event_hub import UserEventHub
from sokovan.bus.user_events import UserEvent, UserEventPublisher
from sokovan.manager.api import create_app
from sokovan.manager.api import events as events_api
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api, user_id
from tests.api.test_auth_and_errors import assert_problem
from tests.api.test_events import next_event, stream, subscribers, wait_no_subscribers
from tests.fault.outage_proxy import OutageProxy, target_of, via


async def _open(api_client: TestClient, headers: dict[str, str]) -> ClientResponse:  # type: ignore[type-arg]
    return await api_client.get("/v2/events", headers=headers)


async def test_sixteen_per_keypair_share_one_subscription(
    api: Api, ctx: ManagerContext, publisher: UserEventPublisher
) -> None:
    limit = events_api.STREAMS_PER_KEYPAIR
    mine = [await _open(api.client, api.alice) for _ in range(limit)]
    try:
        assert [r.status for r in mine] == [200] * limit
        assert await subscribers(ctx) == 1
        refused = await assert_problem(await _open(api.client, api.alice), 429)
        assert str(limit) in refused["detail"]
        other = await _open(api.client, api.bob)  # another keypair has places of its own
        assert other.status == 200
        other.close()
        alice = await user_id(api, "alice")
        event = UserEvent(name="session.status", session_id=str(uuid.uuid4()), owner=alice)
        await publisher.publish_many([event])
        for resp in mine:  # every stream of the shared subscription gets it
            assert (await next_event(resp))[0] == "session.status"
        mine.pop().close()
        for _ in range(50):  # the handler notices its client left within LIVENESS_INTERVAL
            again = await _open(api.client, api.alice)
            if again.status == 200:
                mine.append(again)
                break
            again.close()
            await asyncio.sleep(0.1)
        assert len(mine) == limit, "a closed stream's place was not freed"
    finally:
        for resp in mine:
            resp.close()
    await wait_no_subscribers(ctx)


@pytest.fixture
async def small_manager(ctx: ManagerContext) -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    small = dataclasses.replace(ctx, settings=ctx.settings.model_copy(update={"max_event_streams": 2}))
    client = TestClient(TestServer(create_app(small)))
    await client.start_server()
    yield client
    await client.close()


async def test_the_per_manager_limit(api: Api, small_manager: TestClient) -> None:  # type: ignore[type-arg]
    first, second = await _open(small_manager, api.alice), await _open(small_manager, api.bob)
    try:
        assert (first.status, second.status) == (200, 200)
        body = await assert_problem(await _open(small_manager, api.admin), 429)
        assert "at most 2 event streams" in body["detail"]
    finally:
        first.close()
        second.close()


async def _publish(publisher: UserEventPublisher, n: int) -> None:
    await publisher.publish_many([UserEvent(name="session.status", detail={"i": i}) for i in range(n)])


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not condition():  # noqa: ASYNC110 (the hub's reader fills the queue)
            await asyncio.sleep(0.02)


async def test_a_slow_listener_is_ended_not_buffered(
    ctx: ManagerContext, publisher: UserEventPublisher
) -> None:
    hub = UserEventHub(ctx.redis, ctx.settings.etcd_prefix, queue_size=5)
    slow = await hub.open()
    try:
        await _publish(publisher, 20)  # one message: queued whole, though past the bound
        await _until(lambda: slow.queue.qsize() == 20)
        assert slow.ended is None
        await _publish(publisher, 1)  # never read: still 20 behind when the next message comes
        await _until(lambda: slow.ended is not None)
        assert slow.ended == "slow"
        items = [slow.queue.get_nowait() for _ in range(slow.queue.qsize())]
        assert len(items) == 21  # at most the bound and one message, then the end marker
        assert items[-1] is None and all(isinstance(i, UserEvent) for i in items[:-1])
        assert hub.listeners == 0
    finally:
        await hub.close_listener(slow)
        await hub.close()


async def test_a_listener_that_keeps_up_takes_messages_larger_than_its_bound(
    ctx: ManagerContext, publisher: UserEventPublisher
) -> None:
    """A lane write that moves a thousand sessions publishes their events in one message; a stream
    whose client keeps up gets all of them, however many."""
    hub = UserEventHub(ctx.redis, ctx.settings.etcd_prefix, queue_size=5)
    listener = await hub.open()
    try:
        for _ in range(3):
            await _publish(publisher, 20)
            got = [await asyncio.wait_for(listener.queue.get(), 10) for _ in range(20)]
            assert all(isinstance(event, UserEvent) for event in got)
        assert listener.ended is None and hub.listeners == 1
    finally:
        await hub.close_listener(listener)
        await hub.close()


async def test_a_lost_subscription_ends_streams_and_comes_back(
    ctx: ManagerContext, publisher: UserEventPublisher
) -> None:
    proxy = OutageProxy(target_of(ctx.settings.redis_url)).start()
    redis = aioredis.Redis.from_url(via(ctx.settings.redis_url, proxy), socket_connect_timeout=1)
    hub = UserEventHub(redis, ctx.settings.etcd_prefix)
    try:
        listener = await hub.open()
        proxy.cut()
        assert await asyncio.wait_for(listener.queue.get(), 10) is None
        assert listener.ended == "lost"
        proxy.restore()
        again = await hub.open()  # waits for the hub to subscribe again
        await _publish(publisher, 1)
        event = await asyncio.wait_for(again.queue.get(), 10)
        assert event is not None and event.name == "session.status"
        await hub.close_listener(again)
    finally:
        with contextlib.suppress(Exception):
            await hub.close()
        await redis.aclose()
        proxy.close()


async def test_a_burst_for_others_ends_only_the_slow_listener(
    api: Api, ctx: ManagerContext, publisher: UserEventPublisher
) -> None:
    """2,000 events of bob's sessions (one placement cycle moving many sessions): alice's listener,
    whose filter matches none of them, queues none and stays; a listener that sees everything and
    never reads is ended alone. Then alice's stream (over the API, on the app's own hub) still
    gets her next event."""
    alice, bob = await user_id(api, "alice"), await user_id(api, "bob")
    hub = UserEventHub(ctx.redis, ctx.settings.etcd_prefix, queue_size=1000)  # 2,000 is past it
    mine = await hub.open(lambda e: e.owner == alice)
    slow = await hub.open()
    try:
        async with stream(api, api.alice) as resp:
            burst = [
                UserEvent(name="session.status", session_id=str(uuid.uuid4()), owner=bob) for _ in range(2000)
            ]
            await publisher.publish_many(burst)
            for _ in range(200):
                if slow.ended is not None:
                    break
                await asyncio.sleep(0.05)
            assert slow.ended == "slow"
            assert mine.ended is None and mine.queue.empty()
            assert hub.listeners == 1
            own = UserEvent(name="session.status", session_id=str(uuid.uuid4()), owner=alice)
            await publisher.publish_many([own])
            got = await asyncio.wait_for(mine.queue.get(), 10)
            assert got is not None and got.session_id == own.session_id
            name, data = await next_event(resp)
            assert (name, data["session_id"]) == ("session.status", own.session_id)
    finally:
        await hub.close()


async def test_a_stream_that_keeps_up_gets_a_whole_burst(
    api: Api, ctx: ManagerContext, publisher: UserEventPublisher
) -> None:
    """More events at once than a listener may lag behind (one lane write per 200 of them, arriving
    back to back): a stream whose client reads them all as they come is not ended. Before, the hub
    fanned out every message already read before the stream could write any, and ended it."""
    burst = [UserEvent(name="session.status", session_id=str(uuid.uuid4())) for _ in range(12_000)]
    assert len(burst) > user_event_hub.QUEUE_SIZE
    seen, ended = 0, ""
    async with stream(api, api.admin) as resp:
        await publisher.publish_many(burst)
        async with asyncio.timeout(60):
            while seen < len(burst) and not ended:
                line = await resp.content.readline()
                if line.startswith(b"event:"):
                    seen += 1
                elif line.startswith(b": stream ended") or not line:
                    ended = line.decode() or "EOF"
    assert (seen, ended) == (len(burst), "")


async def test_closed_streams_free_their_places_at_once(api: Api) -> None:
    """Open as many streams as a keypair may, close them all, and open as many again at once: no
    429 (a stream whose client has gone holds no place, even before its handler notices)."""
    limit = events_api.STREAMS_PER_KEYPAIR
    for _ in range(3):
        opened = [await _open(api.client, api.alice) for _ in range(limit)]
        statuses = [r.status for r in opened]
        for resp in opened:
            resp.close()
        assert statuses == [200] * limit
