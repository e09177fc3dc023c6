"""Heartbeats on a stream of their own: an agent's first beat (its registration) goes with its events,
later beats to the heartbeats' stream, which the manager reads in paced batches."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import redis.asyncio as aioredis

from sokovan.agent.outbox import EventOutbox
from sokovan.bus.streams import EventConsumer, beats_key, consumer_backlog, stream_key
from sokovan.common.events import AgentEvent, AgentHeartbeat, KernelRunning, decode_event, encode_event
from sokovan.common.settings import Settings
from tests.test_event_bus import own_prefix


def beat(agent_id: str, seq: int) -> AgentHeartbeat:
    return AgentHeartbeat(
        agent_id=agent_id, seq=seq, boot_id="b", available_slots={}, images=[], rpc_addr="x:1"
    )


def label(fields: dict[bytes, bytes], secret: str) -> str:
    event = decode_event(fields, secret)
    if isinstance(event, AgentHeartbeat):
        return f"{event.agent_id}:h{event.seq}"
    return f"{event.agent_id}:{getattr(event, 'kernel_id', '')}"


async def test_the_first_beat_goes_with_the_events_the_rest_on_their_own_stream(
    redis: aioredis.Redis, settings: Settings
) -> None:
    prefix, secret = own_prefix(settings), settings.cluster_secret or ""
    outbox = EventOutbox(redis, prefix, secret)
    for event in (
        beat("a", 1),
        beat("a", 2),
        beat("b", 1),
        KernelRunning(agent_id="a", kernel_id="k1", session_id="s"),
    ):
        outbox.emit(event)
    task = asyncio.create_task(outbox.run())
    try:
        assert await outbox.drain(10)
        outbox.emit(beat("a", 3))
        assert await outbox.drain(10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    events = [label(f, secret) for _, f in await redis.xrange(stream_key(prefix))]
    beats = [label(f, secret) for _, f in await redis.xrange(beats_key(prefix))]
    assert events == ["a:h1", "b:h1", "a:k1"]
    assert beats == ["a:h2", "a:h3"]
    assert outbox.last_heartbeat_at is not None  # the fence's clock counts beats on either stream


async def test_the_heartbeat_consumer_reads_in_paced_batches_and_counts_in_the_backlog(
    redis: aioredis.Redis, settings: Settings
) -> None:
    prefix, secret = own_prefix(settings), settings.cluster_secret or ""
    reads: list[int] = []
    first, every = asyncio.Event(), asyncio.Event()

    async def handler(events: list[AgentEvent]) -> None:
        reads.append(len(events))
        first.set()
        if sum(reads) >= 50:
            every.set()

    consumer = EventConsumer(
        redis, prefix, secret, "c1", handler, block_ms=100, key=beats_key(prefix), pace=0.5
    )
    await consumer.ensure_group()

    async def put(event: AgentHeartbeat) -> None:
        fields: Any = encode_event(event, secret)
        await redis.xadd(beats_key(prefix), fields)

    await put(beat("a", 1))
    assert await consumer_backlog(redis, prefix) == 1  # the heartbeats' stream counts too
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        async with asyncio.timeout(10):
            await first.wait()
            for seq in range(2, 51):  # one by one, within far less than the pace
                await put(beat("a", seq))
            await every.wait()
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    assert reads[0] == 1 and sum(reads) == 50
    assert len(reads) <= 3, reads  # 49 beats put one at a time came in one or two reads
    assert (await redis.xpending(beats_key(prefix), "managers"))["pending"] == 0
    assert await consumer_backlog(redis, prefix) == 0
