"""Whether PostgreSQL, Redis and etcd answer this manager now: a probe of each every half second.

A peer that drops packets gives no error, only silence; a busy one still answers a probe. So the
API's deadline (`api.deadline`) asks this watch, not the clock alone, whether a slow request waits
on a silent peer (cancel it: 503) or on a busy cluster (let it finish). Each probe has its own
connection where the shared pool could be full under load: PostgreSQL's is a connection of its own
(made again when a probe fails), Redis's a PING, etcd's a read of one key. A peer is silent once no
probe of it has answered for `SILENT_AFTER` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import aetcd
import asyncpg  # type: ignore[import-untyped]
import redis.asyncio as aioredis
import structlog

log = structlog.get_logger(__name__)

PROBE_EVERY = 0.5
PROBE_TIMEOUT = 1.5
SILENT_AFTER = 2.0


class PeerWatch:
    def __init__(
        self, probes: dict[str, Callable[[], Awaitable[object]]], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._probes = probes
        self._clock = clock
        now = clock()
        self.last_ok: dict[str, float] = dict.fromkeys(probes, now)
        self._silent_logged: set[str] = set()

    def silent(self) -> list[str]:
        """The peers no probe has reached for longer than SILENT_AFTER."""
        now = self._clock()
        return [name for name, at in self.last_ok.items() if now - at > SILENT_AFTER]

    async def _probe(self, name: str, probe: Callable[[], Awaitable[object]]) -> None:
        try:
            await asyncio.wait_for(probe(), PROBE_TIMEOUT)
        except Exception as exc:
            if name not in self._silent_logged and self._clock() - self.last_ok[name] > SILENT_AFTER:
                self._silent_logged.add(name)
                log.warning("peers.silent", peer=name, error=type(exc).__name__)
            return
        self.last_ok[name] = self._clock()
        if name in self._silent_logged:
            self._silent_logged.discard(name)
            log.info("peers.answering", peer=name)

    async def run(self, stop: asyncio.Event) -> None:
        """Probe every peer every PROBE_EVERY seconds (at once, each on its own) until `stop`."""
        running: dict[str, asyncio.Task[None]] = {}
        try:
            while not stop.is_set():
                for name, probe in self._probes.items():
                    if name not in running or running[name].done():  # a hung probe is not doubled
                        running[name] = asyncio.create_task(self._probe(name, probe))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), PROBE_EVERY)
        finally:
            for task in running.values():
                task.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)


class PostgresProbe:
    """`SELECT 1` on a connection of its own (not the pool's), made again after a failure."""

    def __init__(self, db_url: str) -> None:
        self._dsn = db_url.replace("postgresql+asyncpg://", "postgresql://", 1)
        self._conn: asyncpg.Connection | None = None

    async def __call__(self) -> None:
        try:
            if self._conn is None or self._conn.is_closed():
                self._conn = await asyncpg.connect(self._dsn, timeout=PROBE_TIMEOUT)
            await self._conn.fetchval("SELECT 1", timeout=PROBE_TIMEOUT)
        except BaseException:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.terminate()
            raise

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()


def manager_peers(db_url: str, redis: aioredis.Redis, etcd: aetcd.Client) -> tuple[PeerWatch, PostgresProbe]:
    postgres = PostgresProbe(db_url)

    async def etcd_read() -> None:
        await etcd.get(b"peer-probe")

    return PeerWatch({"postgres": postgres, "redis": redis.ping, "etcd": etcd_read}), postgres
