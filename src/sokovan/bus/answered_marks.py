"""Marks of kernels already moved to PREPARED or RUNNING, so that the late bus copy of the agent's
event (`streams.answered_key`) is acknowledged without being applied.

The manager that made an agent call applies what the agent answered (`answered_moves`); the
answered stream's copy of the same prepared or running event, read `ANSWERED_DELAY` later, is then
a no-op: its kernel is no longer where the event expects it. Applying it still cost a statement
that locks those kernels and a pass through the event path (in a 10,000-session burst, about an
eighth of PostgreSQL's time). So every `kernel.status` user event to PREPARED or RUNNING (whichever
path moved the kernel: an answer, a two-step move, the bus) also sets a short-lived mark, in the
same Redis pipeline that publishes it; the answered consumer drops the copies whose mark is set.

A mark only ever skips a no-op: it is set after the write that moved the kernel committed, so a
copy read before it (a write slower than the delay), or after it expired, is applied as before,
by a compare-and-set that finds nothing to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

from sokovan.common.events import AgentEvent, KernelPrepared, KernelRunning
from sokovan.common.types import KernelStatus

MARK_TTL_S = 120  # well past ANSWERED_DELAY and a backlog's worth of reads
_MARKED = {KernelStatus.PREPARED.value: "prepared", KernelStatus.RUNNING.value: "running"}
_OF_EVENT: dict[type[AgentEvent], str] = {KernelPrepared: "prepared", KernelRunning: "running"}


def mark_key(prefix: str, kernel_id: str, step: str) -> str:
    return f"{prefix}:answered:done:{kernel_id}:{step}"


def marks_of(prefix: str, events: Sequence[Any]) -> list[str]:
    """The mark keys for the `kernel.status` user events among `events` that reached a marked status."""
    return [
        mark_key(prefix, e.kernel_id, _MARKED[e.to_status])
        for e in events
        if e.name == "kernel.status" and e.kernel_id and e.to_status in _MARKED
    ]


async def unmarked(redis: aioredis.Redis, prefix: str, events: Sequence[AgentEvent]) -> list[bool]:
    """For each event, whether it must be applied: False only for a prepared or running event
    whose kernel's mark is set. One MGET for the whole read."""
    keys = [
        (i, mark_key(prefix, str(e.kernel_id), _OF_EVENT[type(e)]))
        for i, e in enumerate(events)
        if isinstance(e, (KernelPrepared, KernelRunning))
    ]
    keep = [True] * len(events)
    if keys:
        found = await redis.mget([key for _, key in keys])
        for (i, _), value in zip(keys, found, strict=True):
            keep[i] = value is None
    return keep
