"""Inference kernels on the process backend: a port of their own in PORT, and a service address
where their HTTP server answers; other kernels get neither."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from urllib.parse import urlsplit

import aiohttp
import pytest

from sokovan.agent import service_ports
from sokovan.agent.daemon import AgentDaemon
from sokovan.agent.service_ports import PortAllocator, service_host
from sokovan.common.events import KernelCreationFailed, KernelRunning, KernelTerminated
from sokovan.common.rpc import AgentRPCClient, ReconcileItem
from tests.agent.conftest import AgentEvents, spec
from tests.agent.test_kernels import wait_for_output

SERVER = "echo port=$PORT var=$GREETING; exec python3 -m http.server $PORT --bind 127.0.0.1"


async def get_when_up(url: str, within: float = 10.0) -> tuple[int, str]:
    """GET `url`, retrying while the server is still starting."""
    async with aiohttp.ClientSession() as http, asyncio.timeout(within):
        while True:
            try:
                async with http.get(url) as resp:
                    return resp.status, await resp.text()
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.1)


async def running_of(events: AgentEvents, kernel_id: str) -> KernelRunning:
    event = await events.wait_kernel("kernel.running", kernel_id)
    assert isinstance(event, KernelRunning)
    return event


@pytest.mark.parametrize(
    ("rpc_host", "host"),
    [
        ("0.0.0.0", "127.0.0.1"),
        ("", "127.0.0.1"),
        ("10.0.0.5", "10.0.0.5"),
        ("::", "[::1]"),
        ("fe80::1", "[fe80::1]"),
    ],
)
def test_service_host(rpc_host: str, host: str) -> None:
    assert service_host(rpc_host) == host


def test_allocator_never_hands_out_a_reserved_port(monkeypatch: pytest.MonkeyPatch) -> None:
    probes: Iterator[int] = iter([5000, 5000, 5001, 5000, 5001, 5002])
    monkeypatch.setattr(service_ports, "_probe", lambda: next(probes))
    ports = PortAllocator()
    assert [ports.allocate(), ports.allocate()] == [5000, 5001]
    ports.release(5000)
    assert ports.allocate() == 5000
    assert ports.allocate() == 5002
    assert ports.reserved == {5000, 5001, 5002}

    monkeypatch.setattr(service_ports, "_probe", lambda: 5001)
    with pytest.raises(OSError, match="no free TCP port"):
        ports.allocate()


async def test_inference_kernel_serves_on_its_service_addr(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    kernel = spec(SERVER, session_type="inference", image="python:3", environ={"GREETING": "hi", "PORT": "1"})
    await client.create_kernels(agent.rpc_addr, [kernel])
    running = await running_of(events, kernel.kernel_id)
    assert running.service_addr is not None
    url = urlsplit(running.service_addr)
    assert (url.scheme, url.hostname, url.path) == ("http", "127.0.0.1", "")
    assert url.port in agent.backend.ports.reserved
    # The agent's port wins over the session's PORT; the session's other variables still come.
    await wait_for_output(client, agent, kernel.kernel_id, f"port={url.port} var=hi")

    status, body = await get_when_up(running.service_addr + "/")
    assert status == 200 and "stdout.log" in body  # http.server lists the kernel's directory

    # A reconcile re-tells the same address.
    await client.reconcile(
        agent.rpc_addr, [ReconcileItem(kernel_id=kernel.kernel_id, session_id=kernel.session_id, phase="run")]
    )
    await events.wait_for(lambda _: events.of_kernel(kernel.kernel_id) == ["kernel.running"] * 2)
    again = [e for e in events.seen if isinstance(e, KernelRunning) and e.kernel_id == kernel.kernel_id]
    assert {e.service_addr for e in again} == {running.service_addr}

    await client.destroy_kernels(agent.rpc_addr, [kernel.kernel_id])
    await events.wait_kernel("kernel.terminated", kernel.kernel_id)
    assert agent.backend.ports.reserved == frozenset()  # released when the kernel ended


async def test_two_inference_kernels_get_different_ports(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    kernels = [spec("exec sleep 60", session_type="inference") for _ in range(2)]
    await client.create_kernels(agent.rpc_addr, kernels)
    addrs = [(await running_of(events, k.kernel_id)).service_addr for k in kernels]
    ports = {urlsplit(a).port for a in addrs if a is not None}
    assert len(ports) == 2
    assert agent.backend.ports.reserved == ports

    await client.destroy_kernels(agent.rpc_addr, [kernels[0].kernel_id])
    await events.wait_kernel("kernel.terminated", kernels[0].kernel_id)
    assert agent.backend.ports.reserved == {urlsplit(addrs[1] or "").port}


@pytest.mark.parametrize("session_type", ["batch", "interactive"])
async def test_other_kernels_get_no_port_and_no_service_addr(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient, session_type: str
) -> None:
    kernel = spec('echo "port=${PORT-unset}"', session_type=session_type)
    await client.create_kernels(agent.rpc_addr, [kernel])
    running = await running_of(events, kernel.kernel_id)
    assert running.service_addr is None
    terminated = await events.wait_kernel("kernel.terminated", kernel.kernel_id)
    assert isinstance(terminated, KernelTerminated) and terminated.exit_code == 0
    assert (await client.logs(agent.rpc_addr, kernel.kernel_id)).stdout == "port=unset\n"
    assert agent.backend.ports.reserved == frozenset()


async def test_no_free_port_fails_the_creation(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def exhausted() -> int:
        raise OSError("no free TCP port for the kernel's service")

    monkeypatch.setattr(agent.backend.ports, "allocate", exhausted)
    kernel = spec("exec sleep 60", session_type="inference")
    await client.create_kernels(agent.rpc_addr, [kernel])
    failed = await events.wait_kernel("kernel.creation_failed", kernel.kernel_id)
    assert isinstance(failed, KernelCreationFailed) and "no free TCP port" in failed.message
    assert agent.backend.running_kernels() == []
