"""An agent SIGKILLed and started again: its containers ran on without it; it takes them over, the
sessions end as they would have, and a container whose kernel the manager ended meanwhile goes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest

from tests.containers.conftest import container_cluster
from tests.containers.support import containers_of, logs, until
from tests.e2e.cluster import Client, Cluster

AGENT = "ctr-restart-1"


@pytest.fixture(scope="module")
def lone(
    service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, db_url: str
) -> Iterator[Cluster]:
    agents = {AGENT: ("--heartbeat-interval", "1")}
    with container_cluster(service_env, tmp_path_factory.mktemp("restart"), db_url, agents, False) as c:
        yield c


@pytest.fixture
async def api(lone: Cluster) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as http:
        yield Client(http, lone.api, lone.token)


async def test_containers_outlive_a_killed_agent_and_are_taken_over(api: Client, lone: Cluster) -> None:
    idle = await api.create(image="shell", type="interactive", resources={"cpu": 0.5, "mem": "64m"})
    job = await api.create(
        image="shell", type="batch", command="sleep 12; echo finished", resources={"cpu": 0.5, "mem": "64m"}
    )
    idle = await api.wait_status(idle["id"], {"RUNNING"}, within=60)
    job = await api.wait_status(job["id"], {"RUNNING"}, within=60)
    idle_kernel = idle["kernels"][0]["id"]
    job_kernel = job["kernels"][0]["id"]

    lone.agents[AGENT].kill()
    for kernel in (idle_kernel, job_kernel):
        [container] = await containers_of(kernel)
        assert container["State"] == "running", container

    status, _ = await api.request("DELETE", f"/v2/sessions/{idle['id']}")
    assert status == 202
    await asyncio.sleep(2)
    assert [c["State"] for c in await containers_of(idle_kernel)] == ["running"]  # nobody to stop it yet

    lone.agents[AGENT].start()
    await api.wait_status(idle["id"], {"TERMINATED"}, within=90)

    async def removed() -> bool:
        return await containers_of(idle_kernel) == []

    assert await until(removed, "the ended kernel's container removed", within=60)

    ended = await api.wait_status(job["id"], {"TERMINATED", "ERROR"}, within=90)
    assert ended["status"] == "TERMINATED" and ended["result"] == "SUCCESS", ended
    stdout, _ = await logs(api, job["id"])
    assert "finished" in stdout
    assert await containers_of(job_kernel) == []
