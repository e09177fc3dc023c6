"""A hollow fleet serves its inference kernels' endpoints on its own port, unsigned: health and any
path while the kernel lives, 404 otherwise; and those endpoints reach no RPC."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from yarl import URL

from sokovan.agent.hollow import HollowFleet
from sokovan.common.events import KernelRunning
from sokovan.common.rpc import (
    AgentRPCClient,
    CreateKernelsRequest,
    DestroyKernelsRequest,
    ReconcileItem,
    signed_headers,
)
from sokovan.common.settings import Settings
from tests.agent.conftest import AgentEvents, FleetFactory, spec

AGENT = "hollow-0001"


async def request(method: str, url: str, **kwargs: Any) -> tuple[int, Any]:
    """Sends the path as written (no client-side `..` folding), so the server sees it."""
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, URL(url, encoded=True), **kwargs) as resp,
    ):
        return resp.status, await resp.json()


def port_of(fleet: HollowFleet) -> str:
    return fleet.rpc_addr.rpartition(":")[2]


async def start_inference(
    fleet: HollowFleet, client: AgentRPCClient, events: AgentEvents, command: str = "python3 serve.py"
) -> tuple[str, str]:
    """(kernel id, service address) of a new inference kernel on AGENT."""
    kernel = spec(command, session_type="inference")
    await client.create_kernels(fleet.rpc_addr, [kernel], agent_id=AGENT)
    running = await events.wait_kernel("kernel.running", kernel.kernel_id)
    assert isinstance(running, KernelRunning) and running.service_addr is not None
    return kernel.kernel_id, running.service_addr


async def test_inference_kernel_answers_while_alive(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(2, rpc_host="0.0.0.0")
    events = AgentEvents(redis, settings, AGENT)
    kernel_id, addr = await start_inference(fleet, client, events)
    assert addr == f"http://127.0.0.1:{port_of(fleet)}/kernels/{kernel_id}"

    assert await request("GET", f"{addr}/health") == (200, {"ok": True})
    assert await request("POST", f"{addr}/v1/completions", json={"prompt": "hi"}) == (
        200,
        {"kernel_id": kernel_id, "method": "POST", "path": "/v1/completions"},
    )
    assert await request("GET", addr) == (200, {"kernel_id": kernel_id, "method": "GET", "path": "/"})
    assert (await request("DELETE", f"{addr}/a/b?c=d"))[1]["path"] == "/a/b"

    unknown = f"http://127.0.0.1:{port_of(fleet)}/kernels/no-such-kernel"
    for method, url in (("GET", f"{unknown}/health"), ("POST", f"{unknown}/v1/x"), ("GET", unknown)):
        status, body = await request(method, url)
        assert status == 404 and "no-such-kernel" in body["error"]

    # A reconcile re-tells the address; once destroyed, the kernel answers no more.
    await client.reconcile(
        fleet.rpc_addr,
        [ReconcileItem(kernel_id=kernel_id, session_id="s", phase="run")],
        agent_id=AGENT,
    )
    await events.wait_for(lambda _: events.of_kernel(kernel_id) == ["kernel.running"] * 2)
    told = [e for e in events.seen if isinstance(e, KernelRunning) and e.kernel_id == kernel_id]
    assert {e.service_addr for e in told} == {addr}
    await client.destroy_kernels(fleet.rpc_addr, [kernel_id], agent_id=AGENT)
    await events.wait_kernel("kernel.terminated", kernel_id)
    assert (await request("GET", f"{addr}/health"))[0] == 404
    assert (await request("PUT", f"{addr}/v1/x"))[0] == 404
    assert len(fleet.services) == 0


async def test_a_sleep_kernel_stops_answering_when_it_exits(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(2)
    events = AgentEvents(redis, settings, AGENT)
    kernel_id, addr = await start_inference(fleet, client, events, command="sleep 0.2")
    await events.wait_kernel("kernel.terminated", kernel_id)
    assert (await request("GET", f"{addr}/health"))[0] == 404


async def test_other_kernels_have_no_service_addr(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(2)
    events = AgentEvents(redis, settings, AGENT)
    kernel = spec("python3 serve.py", session_type="interactive")
    await client.create_kernels(fleet.rpc_addr, [kernel], agent_id=AGENT)
    running = await events.wait_kernel("kernel.running", kernel.kernel_id)
    assert isinstance(running, KernelRunning) and running.service_addr is None
    status, _ = await request("GET", f"http://{fleet.rpc_addr}/kernels/{kernel.kernel_id}/health")
    assert status == 404


@pytest.mark.parametrize("signed", [False, True])
async def test_kernel_endpoints_cannot_start_or_destroy_anything(
    fleet_factory: FleetFactory,
    redis: aioredis.Redis,
    settings: Settings,
    client: AgentRPCClient,
    signed: bool,
) -> None:
    fleet = await fleet_factory(2)
    events = AgentEvents(redis, settings, None)
    kernel_id, addr = await start_inference(fleet, client, events)
    intruder = spec("sleep 600")
    calls = {
        "create_kernels": CreateKernelsRequest(kernels=[intruder]),
        "destroy_kernels": DestroyKernelsRequest(kernel_ids=[kernel_id], forced=True),
    }
    secret = settings.cluster_secret or ""
    for method, body in calls.items():
        data = body.model_dump_json().encode()
        headers = signed_headers(secret, data, method=method, agent_id=AGENT) if signed else {}
        for base in (addr, f"http://{fleet.rpc_addr}/kernels/no-such-kernel"):
            for path in (f"/rpc/{method}", f"/../../rpc/{method}", f"/%2e%2e/%2e%2e/rpc/{method}"):
                status, answer = await request("POST", base + path, data=data, headers=headers)
                assert status in (200, 404)
                assert "accepted" not in answer

    # Nothing was started or stopped: a sentinel pull's events come after anything those could emit.
    sentinel = spec("true")
    await client.check_and_pull(fleet.rpc_addr, [sentinel], agent_id=AGENT)
    await events.wait_kernel("kernel.prepared", sentinel.kernel_id)
    assert events.of_kernel(intruder.kernel_id) == []
    assert events.of_kernel(kernel_id) == ["kernel.running"]
    assert fleet.running_kernels() == 1
    assert await request("GET", f"{addr}/health") == (200, {"ok": True})


async def test_a_process_agent_serves_no_kernel_endpoints(
    agent: Any, events: AgentEvents, client: AgentRPCClient
) -> None:
    kernel = spec("exec sleep 60", session_type="inference")
    await client.create_kernels(agent.rpc_addr, [kernel])
    await events.wait_kernel("kernel.running", kernel.kernel_id)
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://{agent.rpc_addr}/kernels/{kernel.kernel_id}/health") as resp,
    ):
        assert resp.status == 404
