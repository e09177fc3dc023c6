"""The agent's event outbox: signed events published in the order they were emitted.

Emitting is synchronous and cheap (the event is encoded and signed at once, with
`encode_event`); one task publishes whatever has accumulated as one pipeline of `XADD`s, so a
hollow fleet of a thousand agents costs one Redis round trip per batch, not one per event. A
batch that fails (Redis unreachable) is retried whole until Redis takes it: delivery is at
least once, and the order of emission is kept, so the manager sees an agent's registration
before its kernel events and a kernel's KernelRunning before its KernelTerminated.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from typing import Any

import redis.asyncio as aioredis
import structlog
from pydantic import BaseModel
from redis.exceptions import RedisError

from sokovan.bus.streams import MAXLEN, stream_key
from sokovan.common.events import encode_event

log = structlog.get_logger(__name__)

MAX_BATCH = 500


class EventOutbox:
    """Publishes emitted events in order, in pipelined batches, retrying until Redis takes them."""

    def __init__(self, redis: aioredis.Redis, prefix: str, secret: str, max_batch: int = MAX_BATCH) -> None:
        self._redis = redis
        self._key = stream_key(prefix)
        self._secret = secret
        self._max_batch = max_batch
        self._pending: collections.deque[dict[str, str]] = collections.deque()
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.published = 0

    def emit(self, event: BaseModel) -> None:
        self._pending.append(encode_event(event, self._secret))
        self._idle.clear()
        self._wakeup.set()

    def __len__(self) -> int:
        return len(self._pending)

    async def publish_many(self, entries: list[dict[str, str]]) -> None:
        """One pipeline (no transaction) of `XADD`s, in order; raises if Redis did not take them."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for fields in entries:
                data: Any = fields
                pipe.xadd(self._key, data, maxlen=MAXLEN, approximate=True)
            await pipe.execute()

    async def run(self) -> None:
        while True:
            if not self._pending:
                self._idle.set()
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            count = min(len(self._pending), self._max_batch)
            batch = list(itertools.islice(self._pending, count))
            delay = 0.1
            while True:
                try:
                    await self.publish_many(batch)
                    break
                except (RedisError, OSError) as exc:
                    log.warning("event.publish_failed", events=len(batch), error=str(exc))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
            for _ in range(count):
                self._pending.popleft()
            self.published += count

    async def drain(self, limit: float) -> bool:
        """Wait until every emitted event is published, for at most `limit` seconds."""
        try:
            await asyncio.wait_for(self._idle.wait(), limit)
        except TimeoutError:
            return False
        return True
