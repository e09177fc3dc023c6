"""Attacks on the agent RPC's signature with a captured request: replayed as it is, replayed onto
another method, or signed (with the right secret) over a timestamp that is not a finite time."""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from sokovan.agent.daemon import AgentDaemon
from sokovan.common.rpc import (
    NONCE_HEADER,
    RPC_TAG,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    AgentRPCClient,
    CheckAndPullRequest,
    CreateKernelsRequest,
    rpc_path,
)
from sokovan.common.signing import canonical, new_nonce, sign
from tests.agent.conftest import AgentEvents, assert_nothing_started, post_rpc, signed, spec

REPLAYS = "sokovan_rpc_replays_refused_total"


def replays_refused() -> float:
    return REGISTRY.get_sample_value(REPLAYS) or 0.0


async def test_a_replayed_request_is_refused_and_counted(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    kernel = spec("true")
    body = CheckAndPullRequest(kernels=[kernel]).model_dump_json().encode()
    headers = signed(agent, body, method="check_and_pull")
    before = replays_refused()

    status, answer = await post_rpc(agent.rpc_addr, "check_and_pull", body, headers)
    assert (status, answer["accepted"]) == (200, [kernel.kernel_id])
    await events.wait_kernel("kernel.prepared", kernel.kernel_id)

    status, answer = await post_rpc(agent.rpc_addr, "check_and_pull", body, headers)
    assert status == 401
    assert answer["error"].startswith("replayed request")
    assert replays_refused() == before + 1

    # The replay did nothing: the kernel was prepared once.
    await assert_nothing_started(agent, events, client, "no-such-kernel")
    assert events.of_kernel(kernel.kernel_id).count("kernel.prepared") == 1


async def test_a_prepare_replayed_as_a_start_is_refused(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    """Prepare and start take the same body: only the signed method tells them apart."""
    kernel = spec("echo should-not-run")
    body = CheckAndPullRequest(kernels=[kernel]).model_dump_json().encode()
    assert body == CreateKernelsRequest(kernels=[kernel]).model_dump_json().encode()
    headers = signed(agent, body, method="check_and_pull")

    status, answer = await post_rpc(agent.rpc_addr, "create_kernels", body, headers)
    assert status == 401
    assert "signature" in answer["error"]
    await assert_nothing_started(agent, events, client, kernel.kernel_id)


def _signed_at(secret: str, body: bytes, method: str, timestamp: str, nonce: str) -> dict[str, str]:
    """Headers signed with the right secret over whatever `timestamp` and `nonce` say."""
    payload = canonical(RPC_TAG, ["POST", rpc_path(method), ""], timestamp, nonce, body)
    return {
        "Content-Type": "application/json",
        TIMESTAMP_HEADER: timestamp,
        NONCE_HEADER: nonce,
        SIGNATURE_HEADER: sign(secret, payload),
    }


BAD_TIMESTAMPS = {
    "nan": "nan",
    "NaN": "NaN",
    "inf": "inf",
    "-inf": "-inf",
    "overflowing exponent": "1e400",
    "exponent": f"{time.time():e}",
    "twenty digits": "9" * 20,
    "year 5138": "99999999999",
    "negative": f"-{time.time():.3f}",
    "empty": "",
    "padded": f" {time.time():.3f}",
    "hex": "0x6a000000",
    "an hour ago": f"{time.time() - 3600:.3f}",
}


@pytest.mark.parametrize("case", sorted(BAD_TIMESTAMPS))
async def test_a_timestamp_that_is_not_a_finite_recent_time_is_refused(
    case: str, agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    kernel = spec("echo should-not-run")
    body = CreateKernelsRequest(kernels=[kernel]).model_dump_json().encode()
    secret = agent.settings.cluster_secret or ""
    headers = _signed_at(secret, body, "create_kernels", BAD_TIMESTAMPS[case], new_nonce())
    status, _ = await post_rpc(agent.rpc_addr, "create_kernels", body, headers)
    assert status == 401
    await assert_nothing_started(agent, events, client, kernel.kernel_id)


BAD_NONCES = {
    "empty": "",
    "short": "ab" * 8,
    "long": "ab" * 17,
    "upper case": new_nonce().upper(),
    "not hex": "z" * 32,
    "one short": "0" * 31,
}


@pytest.mark.parametrize("case", sorted(BAD_NONCES))
async def test_a_malformed_nonce_is_refused(case: str, agent: AgentDaemon) -> None:
    body = CreateKernelsRequest(kernels=[spec("echo should-not-run")]).model_dump_json().encode()
    secret = agent.settings.cluster_secret or ""
    headers = _signed_at(secret, body, "create_kernels", f"{time.time():.3f}", BAD_NONCES[case])
    status, _ = await post_rpc(agent.rpc_addr, "create_kernels", body, headers)
    assert status == 401
    assert agent.backend.running_kernels() == []


async def test_the_client_signs_each_call_afresh(agent: AgentDaemon, client: AgentRPCClient) -> None:
    """The manager's own client never trips the replay check: the same call twice is served twice."""
    before = replays_refused()
    kernel = spec("true")
    for _ in range(2):
        answer = await client.check_and_pull(agent.rpc_addr, [kernel], agent_id=agent.agent_id)
        assert answer.accepted == [kernel.kernel_id]
    assert replays_refused() == before
