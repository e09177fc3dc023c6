"""The RPC server refuses every request without a valid cluster-secret signature."""

from __future__ import annotations

import time

import pytest

from sokovan.agent.daemon import AgentDaemon
from sokovan.common.rpc import AgentRPCClient, CreateKernelsRequest, signed_headers
from tests.agent.conftest import AgentEvents, Empty, assert_nothing_started, post_rpc, signed, spec

CREATE = "create_kernels"
BAD_HEADERS = {
    "unsigned": lambda body, secret: {"Content-Type": "application/json"},
    "wrong secret": lambda body, secret: signed_headers("not-the-secret", body, method=CREATE),
    "stale timestamp": lambda body, secret: signed_headers(
        secret, body, method=CREATE, now=time.time() - 3600
    ),
    "future timestamp": lambda body, secret: signed_headers(
        secret, body, method=CREATE, now=time.time() + 3600
    ),
    "signature of another body": lambda body, secret: signed_headers(secret, b"{}", method=CREATE),
}


@pytest.mark.parametrize("case", sorted(BAD_HEADERS))
async def test_bad_signature_is_401_and_starts_nothing(
    case: str, agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    secret = agent.settings.cluster_secret or ""
    rejected = spec("echo should-not-run")
    body = CreateKernelsRequest(kernels=[rejected]).model_dump_json().encode()
    status, answer = await post_rpc(agent.rpc_addr, "create_kernels", body, BAD_HEADERS[case](body, secret))
    assert status == 401
    assert "error" in answer

    # A signed call afterwards is served, and nothing of the rejected one was.
    await assert_nothing_started(agent, events, client, rejected.kernel_id)


async def test_unknown_method_is_404(agent: AgentDaemon) -> None:
    body = b"{}"
    status, answer = await post_rpc(
        agent.rpc_addr, "format_disk", body, signed(agent, body, method="format_disk")
    )
    assert status == 404
    assert "format_disk" in answer["error"]


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
    status, answer = await post_rpc(agent.rpc_addr, method, body, signed(agent, body, method=method))
    assert status == 400
    assert answer["error"].startswith(f"invalid {method} request")
    assert agent.backend.running_kernels() == []


async def test_request_for_another_agent_is_404_and_starts_nothing(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    rejected = spec("echo should-not-run")
    body = CreateKernelsRequest(kernels=[rejected]).model_dump_json().encode()
    headers = signed(agent, body, method=CREATE, agent_id="some-other-agent")
    status, answer = await post_rpc(agent.rpc_addr, "create_kernels", body, headers)
    assert status == 404
    assert answer["error"].startswith("unknown agent 'some-other-agent'")

    # Its own id (like no header at all) is served.
    assert await client.call(agent.rpc_addr, "ping", Empty(), agent.agent_id) == {"agent_id": agent.agent_id}
    await assert_nothing_started(agent, events, client, rejected.kernel_id, agent_id=agent.agent_id)
