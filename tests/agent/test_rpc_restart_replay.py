"""A request captured before the agent restarted cannot be replayed after it: the nonces are in
memory only, so the agent refuses what was signed at or before the newest time an earlier run
accepted (kept in its work dir), or, without that record, before its own start."""

from __future__ import annotations

import time
from pathlib import Path

from sokovan.agent.daemon import AgentDaemon
from sokovan.agent.rpc_guard import FLOOR_FILE
from sokovan.common.rpc import AgentRPCClient, signed_headers
from sokovan.common.signing import NonceStore
from tests.agent.conftest import Empty, post_rpc
from tests.agent.rpc_stub import SECRET, stub_server


async def test_a_request_captured_before_a_restart_is_refused_after_it(tmp_path: Path) -> None:
    floor_file = tmp_path / "rpc-nonce-floor"
    captured = signed_headers(SECRET, b"{}", method="ping")

    async with stub_server(nonces=NonceStore(), floor_file=floor_file) as first:
        status, _ = await post_rpc(first.rpc_addr, "ping", b"{}", captured)
        assert status == 200

    # The agent restarts: a new process, its nonce store empty, the same work dir.
    async with stub_server(nonces=NonceStore(), floor_file=floor_file) as second:
        status, answer = await post_rpc(second.rpc_addr, "ping", b"{}", captured)
        assert status == 401
        assert "restart" in answer["error"]
        # What the manager signs afresh is served.
        status, _ = await post_rpc(
            second.rpc_addr, "ping", b"{}", signed_headers(SECRET, b"{}", method="ping")
        )
        assert status == 200


async def test_without_a_record_what_was_signed_before_the_start_is_refused() -> None:
    captured = signed_headers(SECRET, b"{}", method="ping", now=time.time() - 10)
    async with stub_server(nonces=NonceStore()) as server:
        status, _ = await post_rpc(server.rpc_addr, "ping", b"{}", captured)
        assert status == 401
        status, _ = await post_rpc(
            server.rpc_addr, "ping", b"{}", signed_headers(SECRET, b"{}", method="ping")
        )
        assert status == 200


async def test_the_agent_keeps_the_newest_accepted_time_in_its_work_dir(
    agent: AgentDaemon, client: AgentRPCClient
) -> None:
    before = time.time()
    assert await client.call(agent.rpc_addr, "ping", Empty()) == {"agent_id": agent.agent_id}
    assert float((agent.work_dir / FLOOR_FILE).read_text()) >= round(before, 3) - 0.001
