"""Kernel events an RPC answer carried too go to a stream of their own, which the managers apply
late: the answer comes first, the stream's copy is its fallback (`bus.streams`, `agent.answers`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from typing import Any

import redis.asyncio as aioredis

from sokovan.agent import answers
from sokovan.agent.outbox import EventOutbox
from sokovan.bus.answered_marks import unmarked
from sokovan.bus.streams import EventConsumer, answered_key, consumer_backlog, entry_time, stream_key
from sokovan.bus.user_events import UserEvent, UserEventPublisher
from sokovan.common.events import AgentEvent, KernelPrepared, KernelPulling, KernelRunning, encode_event
from sokovan.common.settings import Settings
from tests.test_event_bus import own_prefix
from tests.test_heartbeat_stream import label


async def test_an_answered_prepared_or_running_goes_to_the_answered_stream_the_rest_at_once(
    redis: aioredis.Redis, settings: Settings
) -> None:
    prefix, secret = own_prefix(settings), settings.cluster_secret or ""
    outbox = EventOutbox(redis, prefix, secret)
    outbox.emit(KernelPulling(agent_id="a", kernel_id="k0", session_id="s"))  # no call: the bus alone
    with answers.answering() as answer:  # what a call's task emits
        outbox.emit(KernelPulling(agent_id="a", kernel_id="k1", session_id="s"))
        outbox.emit(KernelPrepared(agent_id="a", kernel_id="k1", session_id="s"))
    outbox.emit(KernelRunning(agent_id="a", kernel_id="k2", session_id="s"))  # after the answer went
    task = asyncio.create_task(outbox.run())
    try:
        assert await outbox.drain(10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert [(e["name"], e["kernel_id"]) for e in answer.events] == [
        ("kernel.pulling", "k1"),
        ("kernel.prepared", "k1"),
    ]
    events = [label(f, secret) for _, f in await redis.xrange(stream_key(prefix))]
    answered = [label(f, secret) for _, f in await redis.xrange(answered_key(prefix))]
    # k1's pulling goes at once (it shows while the pull runs), its prepared late (the answer
    # moves the session on with it); k0 and k2 were not answered.
    assert events == ["a:k0", "a:k1", "a:k2"]
    assert answered == ["a:k1"]


async def test_the_answered_consumer_applies_an_entry_no_sooner_than_its_delay(
    redis: aioredis.Redis, settings: Settings
) -> None:
    prefix, secret = own_prefix(settings), settings.cluster_secret or ""
    applied: list[tuple[float, list[str]]] = []
    done = asyncio.Event()

    async def handler(events: list[AgentEvent]) -> None:
        applied.append((time.time(), [getattr(e, "kernel_id", "") for e in events]))
        if sum(len(kernels) for _, kernels in applied) >= 3:
            done.set()

    delay = 0.6
    consumer = EventConsumer(
        redis, prefix, secret, "c1", handler, block_ms=100, key=answered_key(prefix), delay=delay
    )
    await consumer.ensure_group()
    added: dict[str, float] = {}
    for kernel in ("k1", "k2", "k3"):
        fields: Any = encode_event(KernelRunning(agent_id="a", kernel_id=kernel, session_id="s"), secret)
        entry = await redis.xadd(answered_key(prefix), fields)
        taken = entry_time(entry)
        assert taken is not None
        added[kernel] = taken
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        async with asyncio.timeout(10):
            await done.wait()
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    # Each entry was applied (once, in order), and none before it was `delay` old.
    assert [k for _, kernels in applied for k in kernels] == ["k1", "k2", "k3"]
    for when, kernels in applied:
        assert all(when >= added[k] + delay - 0.01 for k in kernels), (when, kernels, added)
    assert (await redis.xpending(answered_key(prefix), "managers"))["pending"] == 0
    late: Any = encode_event(KernelRunning(agent_id="a", kernel_id="k4", session_id="s"), secret)
    await redis.xadd(answered_key(prefix), late)
    assert await consumer_backlog(redis, prefix) == 0  # its backlog tells nothing of liveness


async def test_a_stopping_consumer_applies_what_it_read_without_waiting_out_the_delay(
    redis: aioredis.Redis, settings: Settings
) -> None:
    prefix, secret = own_prefix(settings), settings.cluster_secret or ""
    applied: list[str] = []

    async def handler(events: list[AgentEvent]) -> None:
        applied.extend(getattr(e, "kernel_id", "") for e in events)

    consumer = EventConsumer(
        redis, prefix, secret, "c1", handler, block_ms=100, key=answered_key(prefix), delay=60.0
    )
    await consumer.ensure_group()
    fields: Any = encode_event(KernelRunning(agent_id="a", kernel_id="k1", session_id="s"), secret)
    await redis.xadd(answered_key(prefix), fields)
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    async with asyncio.timeout(10):
        while not (await redis.xpending(answered_key(prefix), "managers"))["pending"]:  # noqa: ASYNC110 (Redis)
            await asyncio.sleep(0.02)  # read, now held for the delay
    stop.set()
    await asyncio.wait_for(task, 5)
    assert applied == ["k1"]
    assert (await redis.xpending(answered_key(prefix), "managers"))["pending"] == 0


async def test_a_copy_whose_kernel_has_moved_on_is_acknowledged_unapplied(
    redis: aioredis.Redis, settings: Settings
) -> None:
    """A kernel.status event to PREPARED or RUNNING, published to users, marks its kernel; the
    answered consumer then drops that step's copy (and only that step's), applying the rest."""
    prefix, secret = own_prefix(settings), settings.cluster_secret or ""
    await UserEventPublisher(redis, prefix).publish_many(
        [
            UserEvent(name="kernel.status", kernel_id="k1", from_status="PREPARING", to_status="PREPARED"),
            UserEvent(name="kernel.status", kernel_id="k2", from_status="CREATING", to_status="RUNNING"),
            UserEvent(name="session.status", session_id="s", from_status="CREATING", to_status="RUNNING"),
        ]
    )
    applied: list[str] = []

    async def handler(events: list[AgentEvent]) -> None:
        applied.extend(f"{e.name}:{getattr(e, 'kernel_id', '')}" for e in events)

    consumer = EventConsumer(
        redis, prefix, secret, "c1", handler, block_ms=100, key=answered_key(prefix),
        keep=functools.partial(unmarked, redis, prefix),
    )  # fmt: skip
    await consumer.ensure_group()
    copies: list[AgentEvent] = [
        KernelPrepared(agent_id="a", kernel_id="k1", session_id="s"),  # moved on: dropped
        KernelRunning(agent_id="a", kernel_id="k1", session_id="s"),  # not running yet: applied
        KernelRunning(agent_id="a", kernel_id="k2", session_id="s"),  # moved on: dropped
        KernelPrepared(agent_id="a", kernel_id="k3", session_id="s"),  # no mark: applied
    ]
    for event in copies:
        fields: Any = encode_event(event, secret)
        await redis.xadd(answered_key(prefix), fields)
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        async with asyncio.timeout(10):
            while len(applied) < 2:  # noqa: ASYNC110 (the consumer's own task fills it)
                await asyncio.sleep(0.02)
            while (await redis.xpending(answered_key(prefix), "managers"))["pending"]:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    assert applied == ["kernel.running:k1", "kernel.prepared:k3"]
    info: Any = await redis.xinfo_groups(answered_key(prefix))
    assert info[0]["entries-read"] == 4 and info[0]["pending"] == 0  # every copy acknowledged
