"""The event bus over real Redis: signed events only, at-least-once delivery to the managers."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import redis.asyncio as aioredis

from sokovan.bus.streams import EventConsumer, EventPublisher, stream_key
from sokovan.common.events import AgentEvent, AgentHeartbeat, KernelRunning
from sokovan.common.settings import Settings


def own_prefix(settings: Settings) -> str:
    """A stream of this test's own: daemons of other tests publish on the run's shared one."""
    return f"{settings.etcd_prefix}-bus-{uuid.uuid4().hex[:8]}"


def running(n: int) -> KernelRunning:
    return KernelRunning(agent_id="a1", kernel_id=f"k{n}", session_id="s")


async def test_a_failed_handler_gets_the_event_again(redis: aioredis.Redis, settings: Settings) -> None:
    prefix = own_prefix(settings)
    secret = settings.cluster_secret or ""
    publisher = EventPublisher(redis, prefix, secret)
    seen: list[str] = []
    failures = {"k1": 5}  # fails more often than one pass retries it

    async def handler(events: list[AgentEvent]) -> None:
        for event in events:
            assert isinstance(event, KernelRunning)
            if failures.get(event.kernel_id, 0) > 0:
                failures[event.kernel_id] -= 1
                raise RuntimeError("transient")
        seen.extend(e.kernel_id for e in events if isinstance(e, KernelRunning))

    stop = asyncio.Event()
    consumer = EventConsumer(redis, prefix, secret, "c1", handler, block_ms=100, claim_idle_ms=300)
    await consumer.ensure_group()
    for n in range(3):
        await publisher.publish(running(n))
    task = asyncio.create_task(consumer.run(stop))
    try:
        for _ in range(200):
            if sorted(seen) == ["k0", "k1", "k2"]:
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    assert sorted(seen) == ["k0", "k1", "k2"]
    pending = await redis.xpending(stream_key(prefix), "managers")
    assert pending["pending"] == 0


async def test_unsigned_or_forged_events_are_dropped(redis: aioredis.Redis, settings: Settings) -> None:
    prefix = own_prefix(settings)
    secret = settings.cluster_secret or ""
    seen: list[AgentEvent] = []

    async def handler(events: list[AgentEvent]) -> None:
        seen.extend(events)

    consumer = EventConsumer(redis, prefix, secret, "c2", handler, block_ms=100)
    await consumer.ensure_group()
    key = stream_key(prefix)
    await redis.xadd(key, {"data": running(9).model_dump_json()})
    await EventPublisher(redis, prefix, "wrong-secret").publish(running(8))
    await EventPublisher(redis, prefix, secret).publish(running(7))
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    for _ in range(100):
        if seen:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert [e.kernel_id for e in seen if isinstance(e, KernelRunning)] == ["k7"]


async def test_the_backlog_counts_what_the_managers_have_not_read(
    redis: aioredis.Redis, settings: Settings
) -> None:
    from sokovan.bus.streams import consumer_backlog

    prefix = own_prefix(settings)
    secret = settings.cluster_secret or ""
    consumer = EventConsumer(redis, prefix, secret, "c3", lambda events: asyncio.sleep(0), block_ms=100)
    await consumer.ensure_group()
    assert await consumer_backlog(redis, prefix) == 0
    for n in range(5):
        await EventPublisher(redis, prefix, secret).publish(running(n))
    assert await consumer_backlog(redis, prefix) == 5


async def test_every_read_is_reported_and_one_that_applies_nothing_as_a_failure(
    redis: aioredis.Redis, settings: Settings
) -> None:
    """The node lane's `Watch` hears of each read: idle and applied ones are good, a read whose
    events all failed (the database away) is not, and neither is a consumer that broke off."""
    prefix = own_prefix(settings)
    secret = settings.cluster_secret or ""
    publisher = EventPublisher(redis, prefix, secret)
    reports: list[bool] = []
    away = {"db": True}

    async def handler(events: list[AgentEvent]) -> None:
        if away["db"]:
            raise ConnectionRefusedError("database away")

    stop = asyncio.Event()
    consumer = EventConsumer(redis, prefix, secret, "c4", handler, block_ms=100, on_read=reports.append)
    await consumer.ensure_group()
    task = asyncio.create_task(consumer.run(stop))
    try:
        await asyncio.sleep(0.3)
        assert reports and all(reports)  # idle reads got through
        await publisher.publish(running(1))
        for _ in range(100):
            if not reports[-1]:
                break
            await asyncio.sleep(0.02)
        assert reports[-1] is False
        away["db"] = False
        await publisher.publish(running(2))
        for _ in range(100):
            if reports[-1]:
                break
            await asyncio.sleep(0.02)
        assert reports[-1] is True
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    reports.clear()
    await redis.delete(stream_key(prefix))  # NOGROUP is mended; an unreadable key is not
    await redis.set(stream_key(prefix), "not a stream")
    try:
        await asyncio.wait_for(consumer.run(asyncio.Event()), 5)
    except Exception:
        pass
    assert reports == [False]


@contextlib.asynccontextmanager
async def consuming(consumer: EventConsumer) -> AsyncIterator[None]:
    """`consumer` reading in the background for the block, stopped (its held beats flushed) after."""
    stop = asyncio.Event()
    await consumer.ensure_group()
    task = asyncio.create_task(consumer.run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


def beat(agent: str, seq: int) -> AgentHeartbeat:
    return AgentHeartbeat(
        agent_id=agent, seq=seq, boot_id="b", available_slots={"cpu": "4"}, images=[], rpc_addr="x:1"
    )


async def test_heartbeats_wait_for_one_write_while_other_events_are_applied_at_once(
    redis: aioredis.Redis, settings: Settings
) -> None:
    prefix = own_prefix(settings)
    secret = settings.cluster_secret or ""
    publisher = EventPublisher(redis, prefix, secret)
    calls: list[list[str]] = []
    pending_at_call: list[int] = []
    reads: list[bool] = []

    async def handler(events: list[AgentEvent]) -> None:
        pending_at_call.append((await redis.xpending(stream_key(prefix), "managers"))["pending"])
        calls.append([e.name for e in events])

    consumer = EventConsumer(
        redis, prefix, secret, "c1", handler, block_ms=50, beat_window=2.0, on_read=reads.append
    )
    async with consuming(consumer):
        for n in range(4):  # most likely read one by one, each beat in a read of its own
            await publisher.publish(beat(f"a{n}", 1))
            await asyncio.sleep(0.06)
        await publisher.publish(running(1))
        pending = -1
        for _ in range(150):
            pending = (await redis.xpending(stream_key(prefix), "managers"))["pending"]
            if calls == [["kernel.running"]] and pending == 4:
                break
            await asyncio.sleep(0.01)
        # The kernel event did not wait (written and acknowledged); the beats it overtook are
        # still held, unacknowledged, well within the window.
        assert (calls, pending) == ([["kernel.running"]], 4)
        for _ in range(400):
            if len(calls) == 2 and (await redis.xpending(stream_key(prefix), "managers"))["pending"] == 0:
                break
            await asyncio.sleep(0.02)
    # One write for the four beats, in the order they were read, acknowledged after it.
    assert calls == [["kernel.running"], ["agent.heartbeat"] * 4]
    assert pending_at_call[1] == 4
    assert reads and all(reads)


async def test_held_heartbeats_that_cannot_be_written_stay_pending_and_are_reported(
    redis: aioredis.Redis, settings: Settings
) -> None:
    prefix = own_prefix(settings)
    secret = settings.cluster_secret or ""
    publisher = EventPublisher(redis, prefix, secret)
    reads: list[bool] = []

    async def handler(events: list[AgentEvent]) -> None:
        raise ConnectionRefusedError("PostgreSQL away")

    consumer = EventConsumer(
        redis, prefix, secret, "c1", handler, block_ms=50, beat_window=0.05, on_read=reads.append
    )
    async with consuming(consumer):
        await publisher.publish(beat("a1", 1))
        for _ in range(200):
            if False in reads:
                break
            await asyncio.sleep(0.02)
    # The failed write is reported as a read that applied nothing (as an unwritten beat read alone was).
    assert False in reads
    assert (await redis.xpending(stream_key(prefix), "managers"))["pending"] == 1
