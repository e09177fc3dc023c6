"""The outbox's bound while Redis is unreachable: past `max_pending` the oldest heartbeat goes
first, then the oldest event; drops are counted; what is kept is published in order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from sokovan.agent.outbox import EventOutbox
from sokovan.bus.streams import stream_key
from sokovan.common.events import AgentHeartbeat, KernelRunning, decode_event
from sokovan.common.settings import Settings

UNREACHABLE = "redis://127.0.0.1:1/0"  # the outbox is never run here: nothing connects


def event(label: str) -> BaseModel:
    """`h3`: a heartbeat with seq 3; `k3`: KernelRunning of kernel k3."""
    if label.startswith("h"):
        return AgentHeartbeat(
            agent_id="a", seq=int(label[1:]), boot_id="b", available_slots={}, images=[], rpc_addr="x:1"
        )
    return KernelRunning(agent_id="a", kernel_id=label, session_id="s")


def label_of(fields: dict[Any, Any], secret: str) -> str:
    decoded = decode_event(fields, secret)
    return (
        f"h{decoded.seq}" if isinstance(decoded, AgentHeartbeat) else str(getattr(decoded, "kernel_id", ""))
    )


@pytest.mark.parametrize(
    ("bound", "emitted", "kept", "dropped_heartbeats", "dropped_events"),
    [
        (5, "h1 k1 k2", "h1 k1 k2", 0, 0),
        (3, "h1 k1 h2 k2", "k1 h2 k2", 1, 0),
        (3, "h1 k1 h2 k2 h3 k3", "k1 k2 k3", 3, 0),
        (2, "k1 k2 k3 k4", "k3 k4", 0, 2),
        (2, "h1 k1 k2 k3 h2", "k2 k3", 2, 1),  # even the newest heartbeat: the next beat comes soon
        (1, "h1 h2 h3", "h3", 2, 0),
    ],
)
def test_the_bound_drops_heartbeats_first_then_the_oldest(
    bound: int, emitted: str, kept: str, dropped_heartbeats: int, dropped_events: int
) -> None:
    outbox = EventOutbox(aioredis.Redis.from_url(UNREACHABLE), "p", "secret")
    outbox.max_pending = bound
    for label in emitted.split():
        outbox.emit(event(label))
    names = outbox.pending_names()
    want = ["agent.heartbeat" if k.startswith("h") else "kernel.running" for k in kept.split()]
    assert names == want
    assert (outbox.dropped_heartbeats, outbox.dropped_events) == (dropped_heartbeats, dropped_events)
    assert len(outbox) == len(kept.split())


async def test_what_the_bound_kept_is_published_in_order(redis: aioredis.Redis, settings: Settings) -> None:
    secret = settings.cluster_secret or ""
    outbox = EventOutbox(redis, settings.etcd_prefix, secret)
    outbox.max_pending = 4
    for label in "h1 k1 h2 k2 h3 k3 k4".split():  # as if Redis had been away all along
        outbox.emit(event(label))
    task = asyncio.create_task(outbox.run())
    try:
        assert await outbox.drain(10)
    finally:
        task.cancel()
    entries = await redis.xrange(stream_key(settings.etcd_prefix))
    assert [label_of(fields, secret) for _, fields in entries] == ["k1", "k2", "k3", "k4"]
    assert (outbox.published, outbox.dropped_heartbeats, outbox.dropped_events) == (4, 3, 0)
