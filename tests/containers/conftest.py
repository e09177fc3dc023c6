"""One real cluster per test module whose agents run kernels in containers: a manager and two
agents with `--backend container` on the engine and registry `make services` started
(SOKOVAN_ENGINE, SOKOVAN_REGISTRY in .env.services), the default images built and pushed there."""

from __future__ import annotations

import asyncio
import contextlib
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


@contextlib.contextmanager
def container_cluster(
    service_env: dict[str, str], workdir: Path, db_url: str, agents: dict[str, tuple[str, ...]], proxy: bool
) -> Iterator[Cluster]:
    """A manager, container agents (id → their extra flags) and maybe a proxy, stopped at the end."""
    asyncio.run(truncate_tables(db_url))
    c = Cluster(service_env, workdir)
    try:
        c.bootstrap()
        c.start_manager()
        for agent_id, extra in agents.items():
            c.start_agent(agent_id, SLOTS, extra=container_args(*extra), rpc_port=free_port())
        if proxy:
            c.start_proxy()
        asyncio.run(c.wait_ready(len(agents)))
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def cluster(
    service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, db_url: str
) -> Iterator[Cluster]:
    agents: dict[str, tuple[str, ...]] = {"ctr-agent-1": (), "ctr-agent-2": ()}
    with container_cluster(service_env, tmp_path_factory.mktemp("containers"), db_url, agents, True) as c:
        yield c


@pytest.fixture
async def admin(cluster: Cluster) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as http:
        yield Client(http, cluster.api, cluster.token)
