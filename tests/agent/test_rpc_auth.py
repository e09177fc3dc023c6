"""The RPC server refuses every request without a valid cluster-secret signature."""

from __future__ import annotations

import time

import aiohttp
import pytest

from sokovan.agent.daemon import AgentDaemon
from sokovan.common.rpc import AgentRPCClient, CreateKernelsRequest, signed_headers
from tests.agent.conftest import AgentEvents, Empty, spec

BAD_HEADERS = {
    "unsigned": lambda body, secret: {"Content-Type": "application/json"},
    "wrong secret": lambda body, secret: signed_headers("not-the-secret", body),
    "stale timestamp": lambda body, secret: signed_headers(secret, body, now=time.time() - 3600),
    "future timestamp": lambda body, secret: signed_headers(secret, body, now=time.time() + 3600),
    "signature of another body": lambda body, secret: signed_headers(secret, b"{}"),
}


@pytest.mark.parametrize("case", sorted(BAD_HEADERS))
async def test_bad_signature_is_401_and_starts_nothing(
    case: str, agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    secret = agent.settings.cluster_secret or ""
    rejected = spec("echo should-not-run")
    body = CreateKernelsRequest(kernels=[rejected]).model_dump_json().encode()
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://{agent.rpc_addr}/rpc/create_kernels", data=body, headers=BAD_HEADERS[case](body, secret)
        ) as resp,
    ):
        assert resp.status == 401
        assert "error" in await resp.json()

    # A signed call afterwards is served; its events come after anything the rejected one
    # could have emitted (one ordered outbox), and there is none.
    accepted = spec("true")
    await client.check_and_pull(agent.rpc_addr, [accepted])
    await events.wait_kernel("kernel.prepared", accepted.kernel_id)
    assert events.of_kernel(rejected.kernel_id) == []
    assert agent.backend.running_kernels() == []
    assert not (agent.work_dir / rejected.kernel_id).exists()


async def test_unknown_method_is_404(agent: AgentDaemon) -> None:
    body = b"{}"
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://{agent.rpc_addr}/rpc/format_disk",
            data=body,
            headers=signed_headers(agent.settings.cluster_secret or "", body),
        ) as resp,
    ):
        assert resp.status == 404
        assert "format_disk" in (await resp.json())["error"]


@pytest.mark.parametrize(
    ("method", "body"),
    [
        ("create_kernels", b"{}"),
        ("create_kernels", b'{"kernels": [{"kernel_id": "k1"}]}'),
        ("destroy_kernels", b'{"kernel_ids": "k1"}'),
        ("check_and_pull", b"not json"),
        ("logs", b"{}"),
    ],
)
async def test_invalid_body_is_400(agent: AgentDaemon, method: str, body: bytes) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://{agent.rpc_addr}/rpc/{method}",
            data=body,
            headers=signed_headers(agent.settings.cluster_secret or "", body),
        ) as resp,
    ):
        assert resp.status == 400
        assert (await resp.json())["error"].startswith(f"invalid {method} request")
    assert agent.backend.running_kernels() == []


async def test_request_for_another_agent_is_404_and_starts_nothing(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    secret = agent.settings.cluster_secret or ""
    rejected = spec("echo should-not-run")
    body = CreateKernelsRequest(kernels=[rejected]).model_dump_json().encode()
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://{agent.rpc_addr}/rpc/create_kernels",
            data=body,
            headers=signed_headers(secret, body, agent_id="some-other-agent"),
        ) as resp,
    ):
        assert resp.status == 404
        assert (await resp.json())["error"].startswith("unknown agent 'some-other-agent'")

    # Its own id (like no header at all) is served.
    assert await client.call(agent.rpc_addr, "ping", Empty(), agent.agent_id) == {"agent_id": agent.agent_id}
    accepted = spec("true")
    await client.check_and_pull(agent.rpc_addr, [accepted], agent_id=agent.agent_id)
    await events.wait_kernel("kernel.prepared", accepted.kernel_id)
    assert events.of_kernel(rejected.kernel_id) == []
    assert agent.backend.running_kernels() == []
    assert not (agent.work_dir / rejected.kernel_id).exists()
