"""Following the routing table live: read at start, on every change announcement, and every second.

The table is signed with the cluster secret; a value that does not verify (forged, unsigned, signed
with another secret, or not a table) is ignored and the last good table stays in force. While Redis
is unreachable the last table stays in force too: the proxy keeps forwarding, retries with backoff
and picks the table up again when Redis returns. A table older (by `generated_at`) than the one in
force is ignored, with one warning per such table: an old value put back (a replay, or a manager
lagging behind) cannot roll routes, tokens or limits back. The same table read again is applied
again (idempotent).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from sokovan.bus.routing import RoutingTable, read_table, table_channel
from sokovan.proxy.backoff import Backoff, sleep_unless

log = structlog.get_logger(__name__)

OnTable = Callable[[RoutingTable], Awaitable[None]]


class TableFollower:
    """Calls `on_table` with every good table read (also an unchanged one: applying is idempotent)."""

    def __init__(
        self,
        redis: aioredis.Redis,
        prefix: str,
        secret: str,
        on_table: OnTable,
        poll_interval: float = 1.0,
        backoff: Backoff | None = None,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._secret = secret
        self._on_table = on_table
        self._poll_interval = poll_interval
        self._backoff = backoff or Backoff()
        self._ignored_logged = False
        self._older_logged: float | None = None  # the older table last warned about
        self.last_generated_at: float | None = None
        self.reads = 0  # reads that reached Redis, whatever they found

    async def refresh(self) -> None:
        """Read the table once and apply it if it verifies (raises RedisError/OSError)."""
        table = await read_table(self._redis, self._prefix, self._secret)
        self.reads += 1
        if table is None:
            if not self._ignored_logged:
                # Absent, or present but not signed with our secret: either way keep the last table.
                log.warning("proxy.table_missing_or_unverified", kept=self.last_generated_at)
                self._ignored_logged = True
            return
        self._ignored_logged = False
        if self.last_generated_at is not None and table.generated_at < self.last_generated_at:
            if self._older_logged != table.generated_at:
                log.warning(
                    "proxy.table_older_ignored",
                    generated_at=table.generated_at,
                    kept=self.last_generated_at,
                )
                self._older_logged = table.generated_at
            return
        changed = table.generated_at != self.last_generated_at
        await self._on_table(table)
        self.last_generated_at = table.generated_at
        if changed:
            log.info("proxy.table_applied", generated_at=table.generated_at, deployments=len(table.routes))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._follow(stop)
            except (RedisError, OSError) as exc:
                delay = self._backoff.next_delay()
                log.warning(
                    "proxy.redis_unreachable",
                    during="table",
                    error=str(exc) or type(exc).__name__,
                    retry_in=delay,
                    kept_table=self.last_generated_at,
                )
                if await sleep_unless(stop, delay):
                    return

    async def _follow(self, stop: asyncio.Event) -> None:
        pubsub = self._redis.pubsub()
        try:
            await pubsub.subscribe(table_channel(self._prefix))
            await self.refresh()
            if self._backoff.failures:
                log.info("proxy.redis_back", during="table")
            self._backoff.reset()
            while not stop.is_set():
                # A change announcement, or the poll interval passing, both mean: read the table.
                await pubsub.get_message(ignore_subscribe_messages=True, timeout=self._poll_interval)
                while await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.0) is not None:
                    pass  # several announcements in a row: one read covers them all
                await self.refresh()
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]
