"""Cluster-wide mutual exclusion for the coordinators' lanes, so several managers act as one.

Each lane is guarded by a PostgreSQL session-level advisory lock. A manager keeps the locks it
took (sticky ownership) on one dedicated connection, so a lane's cycles cost no lock round trip
once it holds the lane: the hand-off from one lane to the next is a local wake-up, not a race for
a lock. Another manager skips a lane it does not hold, and asks again for it at most every
`retry_after` seconds (a round trip each): when the holder dies its connection closes, PostgreSQL
releases its locks, and a survivor takes the lanes over within that time.

With `mine` (the lanes this manager should hold: the workers of `sokovan manager --workers N`
share the lanes out, so both cores orchestrate), a manager asks at once only for its own lanes,
and for the others once `adopt_after` seconds have passed since it started, and then only every
`adopt_every` seconds: the workers of one manager stop together, so another worker's lane is free
only when a whole manager is gone, and each of that manager's lanes is still some live worker's
own, asked for every `retry_after`.

With `presence` (this worker's name among its manager's workers) and `owner` (the name of the
worker whose lane a lane is), each worker also holds an advisory lock on its name while its lock
connection lives. A worker asks for another's lane only while that worker is absent, and hands an
adopted lane back (unlocks it) as soon as its worker is present: a worker that took more than
`adopt_after` seconds to start (a slow machine importing the code) gets its lanes back within
`adopt_every` plus its own `retry_after`, instead of leaving one worker running every lane for
the manager's whole life.

The lock connection is checked before each cycle (a connection PostgreSQL closed is noticed by
asyncpg at once) and, every `verify_every` seconds, with a query: a lost connection drops every
lock this manager believed it held, and the lanes are asked for again once PostgreSQL answers.

A connection lost to silence (a statement that timed out: a firewall that dropped its state, a
partition) may still be alive on the server, holding the locks: PostgreSQL would release them only
when its own TCP keepalive gives up, hours later, and no manager could take those lanes meanwhile.
So the next lock connection ends the old one's backend first (`pg_terminate_backend`, only if it is
still the same backend: same pid and start time), and the lanes are free again at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.db import stranded

log = structlog.get_logger(__name__)

RETRY_AFTER = 1.0
VERIFY_EVERY = 5.0
ADOPT_AFTER = 3.0
ADOPT_EVERY = 5.0


def worker_name(manager_id: str, index: int) -> str:
    """The presence lock's name of worker `index` of the manager `manager_id`."""
    return f"worker:{manager_id}:{index}"


def lock_key(name: str) -> int:
    return int.from_bytes(hashlib.sha1(f"sokovan:{name}".encode()).digest()[:8], "big", signed=True)


class CycleLock:
    """The advisory locks of one manager process (share one instance between its coordinators)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        retry_after: float = RETRY_AFTER,
        verify_every: float = VERIFY_EVERY,
        mine: Callable[[str], bool] | None = None,
        adopt_after: float = ADOPT_AFTER,
        adopt_every: float = ADOPT_EVERY,
        presence: str | None = None,
        owner: Callable[[str], str | None] | None = None,
    ) -> None:
        self._engine = engine
        self._retry_after = retry_after
        self._verify_every = verify_every
        self._mine = mine
        self._adopt_from = time.monotonic() + adopt_after
        self._adopt_every = adopt_every
        self._presence = presence
        self._owner = owner
        self._present = False  # this worker's presence lock is held on the lock connection
        self._owner_checked: dict[str, float] = {}  # adopted lane → when its worker was last looked for
        self._conn: AsyncConnection | None = None
        self._io = asyncio.Lock()  # one statement at a time on the lock connection
        self._held: set[str] = set()
        self._refused: dict[str, float] = {}  # lane → when another manager last held it
        self._verified = 0.0
        self._backend: tuple[int, object] | None = None  # the lock connection's (pid, start)
        self._orphan: tuple[int, object] | None = None  # a lost one's, to end on reconnect

    def holds(self, name: str) -> bool:
        """Whether this manager holds `name` (as far as it knows: a cycle re-checks)."""
        return name in self._held

    @contextlib.asynccontextmanager
    async def hold(self, name: str) -> AsyncIterator[bool]:
        """True when this manager holds (or just took) the lock `name` for the cycle."""
        yield await self.acquire(name)

    async def acquire(self, name: str) -> bool:
        async with self._io:
            try:
                return await self._acquire(name)
            except Exception:
                await self._lost("lock connection failed")
                raise

    async def _acquire(self, name: str) -> bool:
        conn = await self._connection()
        now = time.monotonic()
        theirs = self._mine is not None and not self._mine(name)  # another worker's lane
        if name in self._held:
            if now - self._verified > self._verify_every:
                await self._verify(conn)
                self._verified = now
            if theirs and now - self._owner_checked.get(name, now) >= self._adopt_every:
                self._owner_checked[name] = now
                if await self._owner_present(conn, name):
                    await self._hand_back(conn, name, now)
                    return False
            return True
        wait = self._adopt_every if theirs else self._retry_after
        if now - self._refused.get(name, -wait) < wait:
            return False
        if theirs and now < self._adopt_from:
            return False  # its worker takes it first
        if theirs and await self._owner_present(conn, name):
            self._refused[name] = now  # its worker is up and takes it itself
            return False
        acquired = bool((await conn.execute(_TRY_LOCK, {"k": lock_key(name)})).scalar())
        if acquired:
            self._held.add(name)
            self._refused.pop(name, None)
            if theirs:
                self._owner_checked[name] = now
            log.info("lane.acquired", lane=name, adopted=theirs)
        else:
            self._refused[name] = now
        return acquired

    async def _verify(self, conn: AsyncConnection) -> None:
        """The lock connection still answers; this worker's presence lock is taken if it is not."""
        if self._presence is not None and not self._present:
            await self._take_presence(conn)
        else:
            await conn.execute(text("SELECT 1"))

    async def _take_presence(self, conn: AsyncConnection) -> None:
        assert self._presence is not None
        key = lock_key(self._presence)
        self._present = bool((await conn.execute(_TRY_LOCK, {"k": key})).scalar())

    async def _owner_present(self, conn: AsyncConnection, name: str) -> bool:
        """Whether the worker whose lane `name` is holds its presence lock (is up)."""
        owner = self._owner(name) if self._owner is not None else None
        if owner is None:
            return False
        key = lock_key(owner) & 0xFFFFFFFFFFFFFFFF  # pg_locks shows the key as two unsigned halves
        found = await conn.execute(_HELD, {"hi": key >> 32, "lo": key & 0xFFFFFFFF})
        return bool(found.scalar())

    async def _hand_back(self, conn: AsyncConnection, name: str, now: float) -> None:
        """Give an adopted lane back to its worker, which asks for it within its `retry_after`."""
        await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": lock_key(name)})
        self._held.discard(name)
        self._owner_checked.pop(name, None)
        self._refused[name] = now
        log.info("lane.handed_back", lane=name)

    async def _connection(self) -> AsyncConnection:
        conn = self._conn
        if conn is not None and not _closed(await conn.get_raw_connection()):
            return conn
        if conn is not None:
            await self._lost("lock connection closed")
        conn = await self._engine.connect()
        self._conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        self._verified = time.monotonic()
        if self._orphan is not None:
            await self._end_orphan(self._conn, *self._orphan)
            self._orphan = None
        row = (await self._conn.execute(_OWN_BACKEND)).one()
        self._backend = (row.pid, row.backend_start)
        if self._presence is not None:
            await self._take_presence(self._conn)
        return self._conn

    async def _end_orphan(self, conn: AsyncConnection, pid: int, started: object) -> None:
        """End the backend of a lock connection lost to silence, if it still lives (its locks with it)."""
        ended = (await conn.execute(stranded.END_BACKEND, {"pid": pid, "started": started})).scalar()
        if ended:
            log.warning("lane.orphaned_lock_session_ended", pid=pid)

    async def _lost(self, why: str) -> None:
        if self._held:
            log.warning("lane.locks_lost", lanes=sorted(self._held), why=why)
        self._held.clear()
        self._present = False
        self._orphan, self._backend = self._backend, None
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.invalidate()
            with contextlib.suppress(Exception):
                await conn.close()

    async def release_all(self) -> None:
        """Give every lane up (a manager stopping): the others take them over at once."""
        async with self._io:
            self._held.clear()
            self._present = False
            conn, self._conn = self._conn, None
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.invalidate()  # never back into the pool with the locks on it
                with contextlib.suppress(Exception):
                    await conn.close()


_OWN_BACKEND = text(stranded.OWN_BACKEND)
_TRY_LOCK = text("SELECT pg_try_advisory_lock(:k)")
# An advisory lock on a bigint key is listed with its high half as classid, its low half as objid.
_HELD = text(
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND classid = CAST(CAST(:hi AS bigint) AS oid) AND objid = CAST(CAST(:lo AS bigint) AS oid) "
    "AND objsubid = 1)"
)


def _closed(raw: object) -> bool:
    driver = getattr(raw, "driver_connection", None)
    is_closed = getattr(driver, "is_closed", None)
    return bool(is_closed()) if callable(is_closed) else False


async def run_exclusive(lock: CycleLock | None, name: str, cycle: Callable[[], Awaitable[bool]]) -> bool:
    """Run `cycle` if this manager holds the cluster-wide lock `name` (taking it if free); skip
    it (False) when another manager holds it. Without a lock (one manager, tests) just run it."""
    if lock is None:
        return await cycle()
    async with lock.hold(name) as acquired:
        return await cycle() if acquired else False
