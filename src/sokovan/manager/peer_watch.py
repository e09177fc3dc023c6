"""Whether PostgreSQL, Redis and etcd answer this manager now: a probe of each every half second
while a request waits on them.

A peer that drops packets gives no error, only silence; a busy one still answers a probe. So the
API's deadline (`api.deadline`) asks this watch, not the clock alone, whether a slow request waits
on a silent peer (cancel it: 503) or on a busy cluster (let it finish). Each probe has its own
connection where the shared pool could be full under load: PostgreSQL's is a connection of its own
(made again when a probe fails), Redis's a PING, etcd's a read of one key. A peer is silent once no
probe of it has answered for `SILENT_AFTER` seconds of probing at that pace.

Probing costs the manager round trips on all three, several a second per worker, for an answer
that only a request running longer than usual needs. So the watch probes every `PROBE_EVERY` only
while it is wanted: the API's deadline asks for it (`want`) from `WANTED_AFTER` seconds into a
request, long before it first looks (`deadline.FIRST_LOOK`), and it stays wanted `WANTED_FOR`
after the last ask. Otherwise a probe every `IDLE_EVERY` keeps the connections warm. Silence is
never counted from before the fast probing began (`_fast_since`): a peer last probed a while ago
by the idle pace is not silent, only one that the fast probes have not reached for `SILENT_AFTER`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import aetcd
import asyncpg  # type: ignore[import-untyped]
import redis.asyncio as aioredis
import structlog

log = structlog.get_logger(__name__)

PROBE_EVERY = 0.5
IDLE_EVERY = 5.0  # while no request waits long enough to want the watch
WANTED_FOR = 5.0  # the watch probes fast this long after the last `want` (past a request's first look)
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
        self._wanted_until = now + WANTED_FOR  # a starting manager watches at once
        self._fast_since = now
        self._woken = asyncio.Event()

    def fast(self) -> bool:
        return self._clock() < self._wanted_until

    def want(self) -> None:
        """Probe every PROBE_EVERY for the next WANTED_FOR seconds (a request is taking a while)."""
        now = self._clock()
        if now >= self._wanted_until:  # idle until now: fast from here, silence counted from here
            self._fast_since = now
            self._woken.set()
        self._wanted_until = now + WANTED_FOR

    def silent(self) -> list[str]:
        """The peers no probe has reached for longer than SILENT_AFTER of fast probing."""
        now = self._clock()
        return [name for name, at in self.last_ok.items() if now - max(at, self._fast_since) > SILENT_AFTER]

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
        """Probe every peer (at once, each on its own) every PROBE_EVERY seconds while wanted, every
        IDLE_EVERY otherwise, until `stop`."""
        running: dict[str, asyncio.Task[None]] = {}
        try:
            while not stop.is_set():
                for name, probe in self._probes.items():
                    if name not in running or running[name].done():  # a hung probe is not doubled
                        running[name] = asyncio.create_task(self._probe(name, probe))
                self._woken.clear()
                pace = PROBE_EVERY if self.fast() else IDLE_EVERY
                await _first_of(stop, self._woken, pace)
        finally:
            for task in running.values():
                task.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)


async def _first_of(a: asyncio.Event, b: asyncio.Event, seconds: float) -> None:
    waiters = [asyncio.ensure_future(a.wait()), asyncio.ensure_future(b.wait())]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


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
