"""One real cluster per test module: a manager and two process agents."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.cluster import Client, Cluster


@pytest.fixture(scope="module")
def cluster(
    service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, db_url: str
) -> Iterator[Cluster]:
    import asyncio

    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from sokovan.db.models import Base

    async def truncate() -> None:
        engine = create_async_engine(db_url)
        tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
        async with engine.begin() as conn:
            await conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
        await engine.dispose()

    asyncio.run(truncate())
    workdir: Path = tmp_path_factory.mktemp("cluster")
    c = Cluster(service_env, workdir)

    async def registered() -> int:
        from sqlalchemy import func, select

        from sokovan.db.models import Agent

        engine = create_async_engine(db_url)
        async with engine.connect() as conn:
            n = await conn.scalar(select(func.count()).select_from(Agent))
        await engine.dispose()
        return int(n or 0)

    try:  # from the first process on: a failed start must not leave daemons behind
        c.bootstrap()
        c.start_manager()
        c.start_agent("e2e-agent-1")
        c.start_agent("e2e-agent-2")
        c._wait(lambda: asyncio.run(registered()) == 2, "both agents to register")
        yield c
    finally:
        c.stop()


@pytest.fixture
async def admin(cluster: Cluster) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as http:
        yield Client(http, cluster.api, cluster.token)
