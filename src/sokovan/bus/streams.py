"""The event bus: one Redis stream, read by the managers through one consumer group.

Delivery is at least once: a manager acknowledges entries only after its handler ran on them,
and entries a crashed consumer left pending are claimed by another after `claim_idle_ms`.
Handlers must therefore be idempotent. The handler gets each read as one batch (in stream
order), so that it can apply many events in a few statements; a batch that keeps failing is
retried event by event, so one bad event cannot hold the others back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
import structlog
from pydantic import BaseModel
from redis.exceptions import ResponseError

from sokovan.common.events import AgentEvent, BadEvent, decode_event, encode_event

log = structlog.get_logger(__name__)

GROUP = "managers"
MAXLEN = 100_000


def stream_key(prefix: str) -> str:
    return f"{prefix}:events"


async def consumer_backlog(redis: aioredis.Redis, prefix: str) -> int:
    """How many entries of the stream the managers' group has not been handed yet (0 if unknown)."""
    try:
        groups: Any = await redis.xinfo_groups(stream_key(prefix))
    except ResponseError:
        return 0
    for group in groups:
        name = group.get("name") or group.get(b"name")
        if name in (GROUP, GROUP.encode()):
            lag = group.get("lag", group.get(b"lag"))
            return int(lag or 0)
    return 0


class EventPublisher:
    def __init__(self, redis: aioredis.Redis, prefix: str, secret: str) -> None:
        self._redis = redis
        self._key = stream_key(prefix)
        self._secret = secret

    async def publish(self, event: BaseModel) -> None:
        fields: Any = encode_event(event, self._secret)
        await self._redis.xadd(self._key, fields, maxlen=MAXLEN, approximate=True)


Handler = Callable[[list[AgentEvent]], Awaitable[None]]


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
    ) -> None:
        self._redis = redis
        self._key = stream_key(prefix)
        self._secret = secret
        self._consumer = consumer
        self._handler = handler
        self._batch = batch
        self._block_ms = block_ms
        self._claim_idle_ms = claim_idle_ms

    async def ensure_group(self) -> None:
        try:
            await self._redis.xgroup_create(self._key, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def run(self, stop: asyncio.Event) -> None:
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
            for _stream, entries in reply or []:
                await self._dispatch(entries)
            now = asyncio.get_running_loop().time()
            if now - last_claim > self._claim_idle_ms / 1000:
                await self._claim_stale()
                last_claim = now

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

    async def _dispatch(self, entries: list[tuple[Any, dict[Any, Any]]]) -> None:
        ids: list[Any] = []
        events: list[AgentEvent] = []
        done: list[Any] = []
        for entry_id, fields in entries:
            if fields is None:  # trimmed by MAXLEN while pending
                done.append(entry_id)
                continue
            try:
                events.append(decode_event(fields, self._secret))
                ids.append(entry_id)
            except BadEvent as exc:
                log.warning("event.rejected", entry=entry_id, error=str(exc))
                done.append(entry_id)
        if events:
            if await self._handle(events):
                done.extend(ids)
            else:
                for entry_id, event in zip(ids, events, strict=True):
                    if await self._handle([event], tries=1):
                        done.append(entry_id)
        if done:
            await self._redis.xack(self._key, GROUP, *done)

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
