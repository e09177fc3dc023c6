"""The event bus: one Redis stream, read by the managers through one consumer group.

Delivery is at least once: a manager acknowledges entries only after its handler ran on them,
and entries a crashed consumer left pending are claimed by another after `claim_idle_ms`.
Handlers must therefore be idempotent. The handler gets each read as one batch (in stream
order), so that it can apply many events in a few statements; a batch that keeps failing is
retried event by event, so one bad event cannot hold the others back.

Every entry is signed (`common.events`) with the time it was signed and a nonce. The consumer
refuses an entry whose signature does not hold, whose time is malformed or more than `SKEW`
seconds from when Redis took the entry (the time in its id, which no writer can set in the past:
so a backlog read late after an outage still counts, and an old entry put back is refused), and
an entry whose nonce another entry carried before (a replay within the window). Nonces are kept
cluster-wide, as the managers of a group share the stream: `SET <prefix>:bus:nonce:<nonce>
<entry id> NX GET EX ...` for the whole read in one pipeline; the entry id as value lets the same
entry, delivered again after a failed handler, pass. Refused entries are acknowledged (they
would only fail again), logged, and counted in `sokovan_bus_messages_refused_total{reason}`.

Heartbeats travel on a stream of their own (`beats_key`; agents' outboxes put them there), read by
a consumer of the same group that waits `pace` after each read that got something: a fleet's
beats arrive one by one, and read one at a time they cost a read, a nonce claim, a transaction and
an acknowledgement each (a fleet of 1,000 agents beating every 10 s kept a manager a fifth of a
core busy at rest); read once a second they come in batches. Every other event is read as
soon as it is on its stream and applied at once: sessions wait on kernel events, and an agent's
liveness is judged over seconds. Beats found on the events stream (an agent of an older build)
wait `beat_window` there and are applied together, then acknowledged (a crash before that leaves
them pending, to be claimed like any other). A read whose events were all heartbeats reports to
`on_read` when they are applied, not before.

A prepared or running kernel's event that an agent also put in its answer to the RPC call that
caused it (`agent.answers.LATE_ON_BUS`) travels on a third stream (`answered_key`), read by a
consumer that applies each entry no sooner than `delay` after Redis took it. The manager that made
the call applies the answer first, in the same write as the call's transitions; the stream's copy,
applied later, is then a no-op, and only an answer that was lost (a manager that died holding it) is
applied from it. Read at once, the copy raced the answer and often won, so the same move was written
and followed twice. A copy whose kernel is marked as moved on (`answered_marks`) is acknowledged
without being applied. Its backlog is not counted with the other two: it tells nothing of an
agent's liveness.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
import structlog
from pydantic import BaseModel
from redis.exceptions import ResponseError

from sokovan.common.events import AgentEvent, AgentHeartbeat, BadEvent, SealedEvent, encode_event, open_event
from sokovan.common.metrics import BUS_REFUSED
from sokovan.common.signing import SKEW, within_skew

log = structlog.get_logger(__name__)

GROUP = "managers"
MAXLEN = 100_000


def stream_key(prefix: str) -> str:
    return f"{prefix}:events"


def beats_key(prefix: str) -> str:
    """The stream of agents' heartbeats, apart from their other events (see the module's doc)."""
    return f"{prefix}:beats"


def answered_key(prefix: str) -> str:
    """The stream of the prepared and running events that an RPC answer carried too (see the
    module's doc)."""
    return f"{prefix}:answered"


def nonce_key(prefix: str, nonce: str) -> str:
    return f"{prefix}:bus:nonce:{nonce}"


def entry_time(entry_id: Any) -> float | None:
    """When Redis took a stream entry (seconds), from its id `<ms>-<seq>`."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    ms, _, _ = text.partition("-")
    return int(ms) / 1000 if ms.isdigit() else None


def fresh(signed_at: float, added: float | None, now: float) -> bool:
    """Signed within `SKEW` of when Redis took it, and not later than `SKEW` ahead of now."""
    return added is not None and within_skew(signed_at, added) and signed_at <= now + SKEW


async def _lag(redis: aioredis.Redis, key: str) -> int:
    try:
        groups: Any = await redis.xinfo_groups(key)
    except ResponseError:
        return 0
    for group in groups:
        name = group.get("name") or group.get(b"name")
        if name in (GROUP, GROUP.encode()):
            lag = group.get("lag", group.get(b"lag"))
            return int(lag or 0)
    return 0


async def consumer_backlog(redis: aioredis.Redis, prefix: str) -> int:
    """How many entries of the two streams (events and heartbeats) the managers' group has not been
    handed yet (0 where unknown)."""
    return await _lag(redis, stream_key(prefix)) + await _lag(redis, beats_key(prefix))


class EventPublisher:
    def __init__(self, redis: aioredis.Redis, prefix: str, secret: str) -> None:
        self._redis = redis
        self._key = stream_key(prefix)
        self._secret = secret

    async def publish(self, event: BaseModel) -> None:
        fields: Any = encode_event(event, self._secret)
        await self._redis.xadd(self._key, fields, maxlen=MAXLEN, approximate=True)


Handler = Callable[[list[AgentEvent]], Awaitable[None]]


# Each nonce key is set to its entry's id unless it exists (SET NX GET EX, one per key): the old
# owner, or nil when this entry is the first to carry the nonce. One command for a whole read
# instead of one per entry.
_CLAIM_NONCES = """
local owners = {}
for i, key in ipairs(KEYS) do
    owners[i] = redis.call('SET', key, ARGV[2 * i - 1], 'NX', 'GET', 'EX', ARGV[2 * i])
end
return owners
"""


def _same_id(a: Any, b: Any) -> bool:
    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    return text(a) == text(b)


class EventConsumer:
    """Reads the stream in the managers' group and hands each event to `handler`."""

    def __init__(
        self,
        redis: aioredis.Redis,
        prefix: str,
        secret: str,
        consumer: str,
        handler: Handler,
        *,
        batch: int = 1000,
        block_ms: int = 1000,
        claim_idle_ms: int = 30_000,
        on_read: Callable[[bool], None] | None = None,
        beat_window: float = 0.0,
        key: str | None = None,
        pace: float = 0.0,
        delay: float = 0.0,
        keep: Callable[[list[AgentEvent]], Awaitable[list[bool]]] | None = None,
    ) -> None:
        """`pace`: seconds to wait after a read that got something, so that the next read brings a
        batch; `delay`: an entry is applied no sooner than this long after Redis took it; `keep`:
        which of a read's events to apply, the others being acknowledged unapplied (the answered
        stream's copies whose kernel has moved on, `answered_marks`)."""
        self._redis = redis
        self._claim_nonces = redis.register_script(_CLAIM_NONCES)
        self._key = key or stream_key(prefix)
        self._pace = pace
        self._delay = delay
        self._keep = keep
        self._prefix = prefix
        self._secret = secret
        self._consumer = consumer
        self._handler = handler
        self._batch = batch
        self._block_ms = block_ms
        self._claim_idle_ms = claim_idle_ms
        self._on_read = on_read or (lambda ok: None)
        self._beat_window = beat_window
        self._beats: list[tuple[Any, AgentEvent]] = []  # read, not yet applied (entry id, beat)
        self._beat_flush: asyncio.Task[None] | None = None

    async def ensure_group(self) -> None:
        try:
            await self._redis.xgroup_create(self._key, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def run(self, stop: asyncio.Event) -> None:
        """Read until `stop`; `on_read` hears of every read: whether it got through and what it
        held was applied (an idle stream answers a read within `block_ms`)."""
        try:
            await self._run(stop)
        except Exception:  # an outage (restarted by its supervisor) or a fault: reads broke off
            self._on_read(False)
            raise
        if self._beat_flush is not None:  # stopping: what was read is applied, not left pending
            await self._beat_flush

    async def _run(self, stop: asyncio.Event) -> None:
        await self.ensure_group()
        await self._claim_stale()
        last_claim = asyncio.get_running_loop().time()
        while not stop.is_set():
            try:
                reply: Any = await self._redis.xreadgroup(
                    GROUP, self._consumer, {self._key: ">"}, count=self._batch, block=self._block_ms
                )
            except ResponseError as exc:
                if "NOGROUP" in str(exc):
                    await self.ensure_group()
                    continue
                raise
            if self._delay > 0 and reply:
                await self._wait_out(reply, stop)
            results = [await self._dispatch(entries) for _stream, entries in reply or []]
            decided = [applied for applied in results if applied is not None]
            if decided or not results:  # an empty read got through; held beats report later
                self._on_read(all(decided))
            now = asyncio.get_running_loop().time()
            if now - last_claim > self._claim_idle_ms / 1000:
                await self._claim_stale()
                last_claim = now
            if self._pace > 0 and reply:  # let the next read gather a batch
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._pace)

    async def _wait_out(self, reply: Any, stop: asyncio.Event) -> None:
        """Wait until the newest entry of a read is `delay` old (at most `delay`: the clocks of
        Redis and this host may differ), or until `stop`: then what was read is applied at once."""
        added = [entry_time(entry_id) for _stream, entries in reply for entry_id, _ in entries]
        newest = max((t for t in added if t is not None), default=None)
        if newest is None:
            return
        wait = min(self._delay, newest + self._delay - time.time())
        if wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)

    async def _claim_stale(self) -> None:
        start = "0-0"
        while True:
            result = await self._redis.xautoclaim(
                self._key, GROUP, self._consumer, self._claim_idle_ms, start_id=start, count=self._batch
            )
            start, entries = result[0], result[1]
            if entries:
                await self._dispatch(entries)
            if not entries or start in (b"0-0", "0-0"):
                return

    async def _dispatch(self, entries: list[tuple[Any, dict[Any, Any]]]) -> bool | None:
        """Apply `entries` (heartbeats later, see `beat_window`); False when there were events to
        apply now and none of them could be, None when every event waits with the heartbeats."""
        ids: list[Any] = []
        events: list[AgentEvent] = []
        done: list[Any] = []
        now = time.time()
        signed: list[tuple[Any, SealedEvent, float]] = []
        for entry_id, fields in entries:
            if fields is None:  # trimmed by MAXLEN while pending
                done.append(entry_id)
                continue
            try:
                sealed = open_event(fields, self._secret)
            except BadEvent as exc:
                self._refuse(entry_id, exc.reason, str(exc))
                done.append(entry_id)
                continue
            added = entry_time(entry_id)
            if added is None or not fresh(sealed.timestamp, added, now):
                self._refuse(entry_id, "time", f"signed at {sealed.timestamp}, taken at {added}")
                done.append(entry_id)
                continue
            signed.append((entry_id, sealed, added))
        for (entry_id, sealed, _), first in zip(signed, await self._first_seen(signed, now), strict=True):
            if first:
                events.append(sealed.event)
                ids.append(entry_id)
            else:
                self._refuse(
                    entry_id, "replayed", f"nonce {sealed.nonce} seen already", sealed.event.agent_id
                )
                done.append(entry_id)
        if self._keep is not None and events:
            kept = await self._keep(events)
            done += [i for i, k in zip(ids, kept, strict=True) if not k]
            ids = [i for i, k in zip(ids, kept, strict=True) if k]
            events = [e for e, k in zip(events, kept, strict=True) if k]
        if self._beat_window > 0:
            beats: list[tuple[Any, AgentEvent]] = []
            urgent: list[tuple[Any, AgentEvent]] = []
            for pair in zip(ids, events, strict=True):
                (beats if isinstance(pair[1], AgentHeartbeat) else urgent).append(pair)
            if beats:
                self._hold(beats)
                ids, events = [i for i, _ in urgent], [e for _, e in urgent]
                if not events and not done:
                    return None
        applied, acked = await self._apply(ids, events)
        done.extend(acked)
        if done:
            await self._redis.xack(self._key, GROUP, *done)
        return applied

    async def _apply(self, ids: list[Any], events: list[AgentEvent]) -> tuple[bool, list[Any]]:
        """Run the handler on `events` (the entries `ids`): whether any was applied (True when
        there were none) and the entries to acknowledge. A batch that fails is tried event by event."""
        if not events:
            return True, []
        if await self._handle(events):
            return True, list(ids)
        acked = [i for i, e in zip(ids, events, strict=True) if await self._handle([e], tries=1)]
        return bool(acked), acked

    def _hold(self, beats: list[tuple[Any, AgentEvent]]) -> None:
        self._beats.extend(beats)
        if self._beat_flush is None:
            self._beat_flush = asyncio.create_task(self._flush_beats())

    async def _flush_beats(self) -> None:
        """After `beat_window`, apply the held heartbeats (in the order they were read), then
        acknowledge them; beats that could not be applied stay pending and are claimed later."""
        try:
            while self._beats:
                await asyncio.sleep(self._beat_window)
                held, self._beats = self._beats, []
                try:
                    applied, acked = await self._apply([i for i, _ in held], [e for _, e in held])
                    if acked:
                        await self._redis.xack(self._key, GROUP, *acked)
                except Exception:  # Redis away for the acknowledgement: they stay pending
                    log.warning("event.heartbeats_not_acknowledged", count=len(held), exc_info=True)
                    applied = False
                self._on_read(applied)
        finally:
            self._beat_flush = None

    async def _first_seen(self, signed: list[tuple[Any, SealedEvent, float]], now: float) -> list[bool]:
        """Whether each entry is the first to carry its nonce (or that entry again), in one round trip.

        A nonce is kept for twice the window plus how late this read is, so that a copy put on the
        stream within the window is still caught when the consumers lag behind."""
        if not signed:
            return []
        keys = [nonce_key(self._prefix, sealed.nonce) for _, sealed, _ in signed]
        args: list[Any] = []
        for entry_id, _, added in signed:
            args += [entry_id, int(2 * SKEW + max(0.0, now - added)) + 1]
        owners: list[Any] = await self._claim_nonces(keys=keys, args=args)
        return [
            owner is None or _same_id(owner, entry_id)
            for owner, (entry_id, _, _) in zip(owners, signed, strict=True)
        ]

    @staticmethod
    def _refuse(entry_id: Any, reason: str, why: str, agent_id: str | None = None) -> None:
        BUS_REFUSED.labels(reason=reason).inc()
        log.warning("event.rejected", entry=entry_id, reason=reason, error=why, agent_id=agent_id)

    async def _handle(self, events: list[AgentEvent], tries: int = 3) -> bool:
        """Run the handler, retrying transient failures (e.g. a deadlock) a few times.

        Entries whose handler keeps failing stay pending; a later claim retries them.
        """
        for attempt in range(1, tries + 1):
            try:
                await self._handler(events)
                return True
            except Exception:
                if attempt == tries:
                    log.exception("event.handler_failed", count=len(events), first=events[0].name)
                    return False
                await asyncio.sleep(0.05 * attempt)
        return False
