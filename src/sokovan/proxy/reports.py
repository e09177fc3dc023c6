"""Writing health reports to Redis: the latest report per route, batched, retried through outages.

A probe hands its report over with `put` and never waits for Redis. The writer sends everything
pending in one HSET; reports that arrive while a write is in flight go in the next one. When Redis
is away the latest report of each route is kept (an older one is superseded, never queued) and
written when it returns; the manager judges reports by their probe time, so a late one is harmless.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import structlog
from redis.exceptions import RedisError

from sokovan.bus.routing import HealthReport
from sokovan.proxy.backoff import Backoff, sleep_unless

log = structlog.get_logger(__name__)

WriteReports = Callable[[list[HealthReport]], Awaitable[None]]


class ReportWriter:
    def __init__(self, write: WriteReports, backoff: Backoff | None = None) -> None:
        self._write = write
        self._backoff = backoff or Backoff()
        self._pending: dict[uuid.UUID, HealthReport] = {}
        self._discarded: set[uuid.UUID] = set()  # during the write in flight
        self._wake = asyncio.Event()
        self.written = 0

    def put(self, report: HealthReport) -> None:
        self._pending[report.route_id] = report
        self._wake.set()

    def discard(self, route_id: uuid.UUID) -> None:
        """Drop a report not yet written (the route left the table)."""
        self._pending.pop(route_id, None)
        self._discarded.add(route_id)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            waiter = asyncio.create_task(self._wake.wait())
            stopper = asyncio.create_task(stop.wait())
            try:
                await asyncio.wait([waiter, stopper], return_when=asyncio.FIRST_COMPLETED)
            finally:  # also when this task is cancelled: a pending wait left behind is destroyed later
                waiter.cancel()
                stopper.cancel()
            if stop.is_set():
                return
            if not await self.flush() and await sleep_unless(stop, self._backoff.next_delay()):
                return

    async def flush(self) -> bool:
        """Write what is pending; False (and the reports kept) if Redis failed."""
        self._wake.clear()
        if not self._pending:
            return True
        batch, self._pending = self._pending, {}
        self._discarded = set()
        try:
            await self._write(list(batch.values()))
        except (RedisError, OSError) as exc:
            for rid, report in batch.items():
                if rid not in self._discarded:
                    self._pending.setdefault(rid, report)  # a newer report that arrived meanwhile wins
            self._wake.set()
            log.warning(
                "proxy.redis_unreachable",
                during="reports",
                error=str(exc) or type(exc).__name__,
                pending=len(self._pending),
            )
            return False
        if self._backoff.failures:
            log.info("proxy.redis_back", during="reports")
        self._backoff.reset()
        self.written += len(batch)
        return True
