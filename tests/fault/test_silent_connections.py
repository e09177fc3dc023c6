"""A connection to PostgreSQL that goes silent inside a transaction (`db.stranded`): the statement
times out, and the row locks its server session held are free at once, not after the server's
idle-in-transaction timeout (a minute); the engine goes on with fresh connections."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.settings import Settings
from sokovan.db import stranded
from sokovan.db.engine import make_engine
from tests.fault.outage_proxy import OutageProxy, target_of, via

TIMEOUT = 1.0  # the proxied engine's statement timeout (the manager's is 30 s)
_ALIVE = text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid")


@pytest.fixture
async def proxy(settings: Settings) -> AsyncIterator[OutageProxy]:
    proxy = OutageProxy(target_of(settings.db_url)).start()
    try:
        yield proxy
    finally:
        proxy.close()


async def test_a_transaction_gone_silent_gives_its_row_locks_up_at_once(
    settings: Settings, engine: AsyncEngine, proxy: OutageProxy
) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO domains (name) VALUES ('silent')"))
    proxied = make_engine(via(settings.db_url, proxy), pool_size=2, max_overflow=0, command_timeout=TIMEOUT)
    try:
        with pytest.raises(TimeoutError):
            async with proxied.begin() as conn:
                await conn.execute(text("SELECT name FROM domains WHERE name = 'silent' FOR UPDATE"))
                pid, _ = (await conn.get_raw_connection()).info[stranded.BACKEND]
                proxy.strand()
                await conn.execute(text("SELECT 1"))
        async with engine.connect() as direct:
            # The lock is waited for, well within the server's own minute: free only once the
            # silent session is ended.
            await direct.execute(text("SET lock_timeout = '20s'"))
            locked = text("SELECT name FROM domains WHERE name = 'silent' FOR UPDATE")
            assert (await direct.execute(locked)).scalar() == "silent"
            assert (await direct.execute(_ALIVE, {"pid": pid})).scalar() == 0
            await direct.rollback()
        # The engine goes on with a fresh connection (a new server session), not a silent one.
        async with proxied.connect() as conn:
            assert (await conn.execute(text("SELECT 1"))).scalar() == 1
            again, _ = (await conn.get_raw_connection()).info[stranded.BACKEND]
            assert again != pid
    finally:
        await proxied.dispose()


async def test_idle_connections_of_a_silent_pool_are_replaced_not_waited_on(
    settings: Settings, proxy: OutageProxy
) -> None:
    """One statement times out; the other pooled connections, silent too, are not each waited on."""
    proxied = make_engine(via(settings.db_url, proxy), pool_size=3, max_overflow=0, command_timeout=TIMEOUT)
    try:
        conns = [await proxied.connect() for _ in range(3)]
        pids = [(await c.get_raw_connection()).info[stranded.BACKEND][0] for c in conns]
        for c in conns:
            await c.close()  # back into the pool, idle
        proxy.strand()
        with pytest.raises(TimeoutError):
            async with proxied.connect() as conn:
                await conn.execute(text("SELECT 1"))
        # Each of the next three checkouts gets a fresh connection that answers: none of them is a
        # pooled silent one (which would time out).
        fresh = [await proxied.connect() for _ in range(3)]
        try:
            for conn in fresh:
                assert (await conn.execute(text("SELECT 1"))).scalar() == 1
                assert (await conn.get_raw_connection()).info[stranded.BACKEND][0] not in pids
        finally:
            for conn in fresh:
                await conn.close()
    finally:
        await proxied.dispose()
