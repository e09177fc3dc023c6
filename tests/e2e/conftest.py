"""One real cluster per test module: a manager and two process agents."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from sokovan.harness import truncate_tables
from tests.e2e.cluster import Client, Cluster

SLOTS = "cpu=2,mem=2g"


@pytest.fixture(scope="module")
def cluster(
    service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, db_url: str
) -> Iterator[Cluster]:
    asyncio.run(truncate_tables(db_url))
    workdir: Path = tmp_path_factory.mktemp("cluster")
    c = Cluster(service_env, workdir)
    try:  # from the first process on: a failed start must not leave daemons behind
        c.bootstrap()
        c.start_manager()
        c.start_agent("e2e-agent-1", SLOTS)
        c.start_agent("e2e-agent-2", SLOTS)
        asyncio.run(c.wait_ready(2))
        yield c
    finally:
        c.stop()


@pytest.fixture
async def admin(cluster: Cluster) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as http:
        yield Client(http, cluster.api, cluster.token)
