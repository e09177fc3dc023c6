"""Cluster-wide mutual exclusion for periodic work, so several managers act as one.

A PostgreSQL session-level advisory lock is held on a dedicated connection for the whole cycle;
a manager that cannot take it skips that cycle (another one is doing the work).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine


def lock_key(name: str) -> int:
    return int.from_bytes(hashlib.sha1(f"sokovan:{name}".encode()).digest()[:8], "big", signed=True)


class CycleLock:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    @contextlib.asynccontextmanager
    async def hold(self, name: str) -> AsyncIterator[bool]:
        key = lock_key(name)
        async with self._engine.connect() as conn:
            acquired = bool(
                (await conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key})).scalar()
            )
            await conn.commit()
            try:
                yield acquired
            finally:
                if acquired:
                    await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                    await conn.commit()


async def run_exclusive(lock: CycleLock | None, name: str, cycle: Callable[[], Awaitable[bool]]) -> bool:
    """Run `cycle` holding the cluster-wide lock `name`; skip it (False) when another manager holds
    it. Without a lock (one manager, tests) just run it."""
    if lock is None:
        return await cycle()
    async with lock.hold(name) as acquired:
        return await cycle() if acquired else False
