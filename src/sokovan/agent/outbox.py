"""The agent's event outbox: signed events published in the order they were emitted.

Emitting is synchronous and cheap (the event is encoded at once); it is signed (`seal`) when it
is published, so an event held through a long Redis outage still carries a fresh time. One task
publishes whatever has accumulated as one pipeline of `XADD`s, so a hollow fleet of a thousand
agents costs one Redis round trip per batch, not one per event. Heartbeats go to a stream of their
own (`bus.streams.beats_key`), read in batches, all but each agent's first (its registration),
which goes with the events. A prepared or running kernel's event that also went into the answer of
the RPC call that caused it (`agent.answers.LATE_ON_BUS`) goes to a third stream
(`bus.streams.answered_key`), which the managers read late: it is the answer's fallback. A batch
that fails (Redis unreachable) is retried whole until Redis takes it: delivery is at least once,
and the order of emission is kept on each stream, so the manager sees an agent's registration
before its kernel events and, of the events that are not answered, a kernel's KernelRunning before
its KernelTerminated (an answered KernelRunning the manager has from the answer; its late copy,
after the end, is a no-op).

While Redis is unreachable the outbox holds at most `max_pending` events (`--max-outbox`, default
10,000), so an outage cannot grow the agent without bound. Past it the oldest heartbeat goes
first (a newer one says the same and more), then the oldest event of any kind; every drop is
counted (`dropped_heartbeats`, `dropped_events`) and logged (`event.outbox_dropped`, the first
and every thousandth). A lost kernel event is not lost for good: the manager's reconciler asks
the agent about every kernel whose state it has not heard of in a while, and the agent answers
with the event that tells the kernel's current state (`ProcessBackend.reconcile`).

For tests of the manager's recovery, an outbox can be told to lose events on purpose
(`EventDropper`, the agent's hidden `--drop-events` option): the first event of each named kind
is dropped instead of emitted, once per outbox (per agent process, per hollow fleet).
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis.asyncio as aioredis
import structlog
from pydantic import BaseModel
from redis.exceptions import RedisError

from sokovan.agent import answers
from sokovan.bus.streams import MAXLEN, answered_key, beats_key, stream_key
from sokovan.common.events import KERNEL_EVENT_TYPES, AgentHeartbeat, AgentStopping, seal

log = structlog.get_logger(__name__)

MAX_BATCH = 500
MAX_PENDING = 10_000
LOG_EVERY_DROP = 1000
HEARTBEAT = str(AgentHeartbeat.model_fields["name"].default)

# The `name` of every event an agent publishes: what `--drop-events` accepts.
EVENT_NAMES: frozenset[str] = frozenset(
    str(kind.model_fields["name"].default) for kind in (AgentHeartbeat, AgentStopping, *KERNEL_EVENT_TYPES)
)


def parse_event_names(value: str | Iterable[str] | None) -> frozenset[str]:
    """`"kernel.running,kernel.prepared"` or a list of names; ValueError names the unknown ones."""
    if value is None:
        return frozenset()
    parts = value.split(",") if isinstance(value, str) else list(value)
    if not all(isinstance(part, str) for part in parts):
        raise ValueError(f"expected event names, got {value!r}")
    names = frozenset(part.strip() for part in parts if part.strip())
    unknown = sorted(names - EVENT_NAMES)
    if unknown:
        raise ValueError(f"unknown event names {unknown} (known: {', '.join(sorted(EVENT_NAMES))})")
    return names


class EventDropper:
    """Fault injection for tests: drops the first event of each named kind, once.

    `drops(event)` says whether to drop this one (and then forgets the name, so only the first
    event of that kind is lost); each drop is logged as `event.dropped_for_test`.
    """

    def __init__(self, names: Iterable[str]) -> None:
        self._pending = set(parse_event_names(names))

    @property
    def pending(self) -> frozenset[str]:
        """The kinds whose first event has not come yet."""
        return frozenset(self._pending)

    def drops(self, event: BaseModel) -> bool:
        name = getattr(event, "name", None)
        if name not in self._pending:
            return False
        self._pending.discard(name)
        log.warning(
            "event.dropped_for_test",
            event_name=name,
            agent_id=getattr(event, "agent_id", None),
            kernel_id=getattr(event, "kernel_id", None),
        )
        return True

    def wrap(self, emit: Callable[[BaseModel], None]) -> Callable[[BaseModel], None]:
        """`emit` that drops what this dropper drops."""

        def dropping_emit(event: BaseModel) -> None:
            if not self.drops(event):
                emit(event)

        return dropping_emit


class EventOutbox:
    """Publishes emitted events in order, in pipelined batches, retrying until Redis takes them."""

    def __init__(
        self,
        redis: aioredis.Redis,
        prefix: str,
        secret: str,
        max_batch: int = MAX_BATCH,
        drop_events: Iterable[str] = (),
    ) -> None:
        self._redis = redis
        self._key = stream_key(prefix)
        self._beats_key = beats_key(prefix)
        self._answered_key = answered_key(prefix)
        self._announced: set[str] = set()  # agents whose registration beat went out
        self._secret = secret
        self._max_batch = max_batch
        # (name, event JSON, whether it goes late: an RPC answer carried it, `answers.note`)
        self._pending: collections.deque[tuple[str, str, bool]] = collections.deque()
        self._in_flight = 0
        self._heartbeats = 0  # how many of the pending are heartbeats
        self.max_pending = MAX_PENDING
        self.dropped_heartbeats = 0
        self.dropped_events = 0
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.published = 0
        self.last_heartbeat_at: float | None = None  # monotonic time Redis last took a heartbeat
        names = frozenset(drop_events)
        self._dropper = EventDropper(names) if names else None

    def emit(self, event: BaseModel) -> None:
        if self._dropper is not None and self._dropper.drops(event):
            return
        late = answers.note(event)
        name = str(getattr(event, "name", ""))
        self._pending.append((name, event.model_dump_json(), late))
        self._heartbeats += name == HEARTBEAT
        while len(self._pending) > self.max_pending:
            self._drop_oldest()
        self._idle.clear()
        self._wakeup.set()

    def _drop_oldest(self) -> None:
        """Drop the oldest pending heartbeat, or without one the oldest pending event."""
        if self._heartbeats:
            index = next(i for i, (name, _, _) in enumerate(self._pending) if name == HEARTBEAT)
            del self._pending[index]
            self._heartbeats -= 1
            self.dropped_heartbeats += 1
        else:
            self._pending.popleft()
            self.dropped_events += 1
        dropped = self.dropped_heartbeats + self.dropped_events
        if dropped % LOG_EVERY_DROP == 1 or LOG_EVERY_DROP == 1:
            log.warning(
                "event.outbox_dropped",
                heartbeats=self.dropped_heartbeats,
                events=self.dropped_events,
                max_pending=self.max_pending,
            )

    def pending_names(self) -> list[str]:
        """The names of the pending events, oldest first (for tests and diagnostics)."""
        return [name for name, _, _ in self._pending]

    def __len__(self) -> int:
        """Events not published yet (pending and in flight)."""
        return len(self._pending) + self._in_flight

    def _stream_of(self, name: str, data: str, late: bool) -> str:
        """Where an event goes: a heartbeat to the heartbeats' stream, except an agent's first
        from this outbox (its registration), which goes with the events so that the manager has it
        before any of the agent's kernel events; an event whose copy may go late (an RPC answer
        carried it, `answers.note`) to the answered events' stream; every other event to the
        events' stream."""
        if name != HEARTBEAT:
            return self._answered_key if late else self._key
        agent_id = str(json.loads(data).get("agent_id", ""))
        if agent_id in self._announced:
            return self._beats_key
        self._announced.add(agent_id)
        return self._key

    async def publish_many(self, entries: list[tuple[str, dict[str, str]]]) -> None:
        """One pipeline (no transaction) of `XADD`s of (stream, fields), in order; raises if Redis
        did not take them."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for key, fields in entries:
                data: Any = fields
                pipe.xadd(key, data, maxlen=MAXLEN, approximate=True)
            await pipe.execute()

    async def run(self) -> None:
        while True:
            if not self._pending:
                self._idle.set()
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            count = min(len(self._pending), self._max_batch)
            taken = [self._pending.popleft() for _ in range(count)]  # drops never touch a batch in flight
            self._heartbeats -= sum(name == HEARTBEAT for name, _, _ in taken)
            self._in_flight = count
            streams = [self._stream_of(name, data, late) for name, data, late in taken]
            delay = 0.1
            while True:
                try:
                    # Signed at each attempt: the time in the signature is when Redis got it.
                    sealed = [seal(data, self._secret) for _, data, _ in taken]
                    await self.publish_many(list(zip(streams, sealed, strict=True)))
                    if any(name == HEARTBEAT for name, _, _ in taken):
                        self.last_heartbeat_at = time.monotonic()
                    break
                except (RedisError, OSError) as exc:
                    log.warning("event.publish_failed", events=count, error=str(exc))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
            self._in_flight = 0
            self.published += count

    async def drain(self, limit: float) -> bool:
        """Wait until every emitted event is published, for at most `limit` seconds."""
        try:
            await asyncio.wait_for(self._idle.wait(), limit)
        except TimeoutError:
            return False
        return True
