"""The database side of a local test cluster (see sokovan.harness): create and migrate it, empty
it, bootstrap the admin keypair, and wait for agents to register."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Collection, Iterable, Mapping

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from sokovan.db import migrate
from sokovan.db.base import Base
from sokovan.db.models import Agent
from sokovan.harness.process import SOKOVAN, Daemon, HarnessError, check_alive


async def prepare_database(url: str, *, fresh: bool = False) -> None:
    """Create the database `url` names if it is missing (dropping it first when `fresh`) and
    migrate it to head."""
    server, _, name = url.rpartition("/")
    admin = create_async_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            if fresh:
                await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            exists = await conn.scalar(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name})
            if not exists:
                await conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        await admin.dispose()
    await asyncio.to_thread(migrate.upgrade, url)


async def truncate_tables(url: str) -> None:
    """Every table empty, identities restarted."""
    engine = create_async_engine(url)
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    finally:
        await engine.dispose()


def bootstrap_admin(env: Mapping[str, str]) -> str:
    """A new admin token, made the way an operator makes one: `sokovan admin bootstrap --json`."""
    done = subprocess.run(
        [*SOKOVAN, "admin", "bootstrap", "--json"], env=dict(env), capture_output=True, check=False
    )
    if done.returncode != 0:
        raise HarnessError(f"sokovan admin bootstrap failed: {done.stderr.decode(errors='replace')}")
    token: str = json.loads(done.stdout)["token"]
    return token


async def count_agents(engine: AsyncEngine, ids: Collection[str] | None = None) -> int:
    """Registered agents (rows in the agents table), or only those of `ids`."""
    query = select(func.count()).select_from(Agent)
    if ids is not None:
        query = query.where(Agent.id.in_(list(ids)))
    async with engine.connect() as conn:
        return int(await conn.scalar(query) or 0)


async def wait_agents(
    db_url: str,
    count: int,
    within: float = 30,
    *,
    ids: Collection[str] | None = None,
    watch: Iterable[Daemon] = (),
) -> None:
    """Until `count` agents (of `ids`, when given) have registered; HarnessError when a watched
    daemon exits on its own first, or after `within` seconds."""
    watched = list(watch)
    engine = create_async_engine(db_url)
    deadline = time.monotonic() + within
    try:
        while (n := await count_agents(engine, ids)) < count:
            check_alive(watched)
            if time.monotonic() > deadline:
                raise HarnessError(f"only {n}/{count} agents registered after {within:.0f}s")
            await asyncio.sleep(0.2)
    finally:
        await engine.dispose()
