"""One real cluster per test module whose agents run kernels in containers: a manager and two
agents with `--backend container` on the engine and registry `make services` started
(SOKOVAN_ENGINE, SOKOVAN_REGISTRY in .env.services), the default images built and pushed there."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from sokovan.harness import truncate_tables
from sokovan.harness.process import free_port
from tests.e2e.cluster import Client, Cluster
from tests.services import service

SLOTS = "cpu=2,mem=2g"
DOWN_REGISTRY = "127.0.0.1:9"


def engine() -> str:
    url = service("SOKOVAN_ENGINE", "")
    if not url:
        pytest.fail("no container engine: run `make services` (it starts Podman's API service)")
    return url


def registry() -> str:
    value = service("SOKOVAN_REGISTRY", "")
    if not value:
        pytest.fail("no local registry: run `make services` (it starts one)")
    return value


def container_args(*more: str) -> tuple[str, ...]:
    # a second registry that is down: images named there are accepted, and their pulls fail
    return (
        "--backend",
        "container",
        "--engine",
        engine(),
        "--registry",
        registry(),
        "--registry",
        DOWN_REGISTRY,
        *more,
    )


@pytest.fixture(scope="module")
def cluster(
    service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, db_url: str
) -> Iterator[Cluster]:
    asyncio.run(truncate_tables(db_url))
    workdir: Path = tmp_path_factory.mktemp("containers")
    c = Cluster(service_env, workdir)
    try:
        c.bootstrap()
        c.start_manager()
        c.start_agent("ctr-agent-1", SLOTS, extra=container_args(), rpc_port=free_port())
        c.start_agent("ctr-agent-2", SLOTS, extra=container_args())
        c.start_proxy()
        asyncio.run(c.wait_ready(2))
        yield c
    finally:
        c.stop()


@pytest.fixture
async def admin(cluster: Cluster) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as http:
        yield Client(http, cluster.api, cluster.token)
