"""Registration and heartbeats over Redis."""

from __future__ import annotations

from sokovan.agent.daemon import AgentDaemon
from sokovan.common.events import AgentHeartbeat
from sokovan.common.rpc import AgentRPCClient
from tests.agent.conftest import AgentEvents, Empty


async def test_registration_then_heartbeats_with_increasing_seq(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    first = await events.wait_for(lambda e: e.name == "agent.heartbeat")
    assert isinstance(first, AgentHeartbeat)
    assert first.seq == 1
    assert first.boot_id == agent.boot_id
    assert first.scaling_group == "default"
    assert first.available_slots == {"cpu": "2", "mem": str(2**30)}
    assert first.images == ["custom", "python:3", "shell"]
    assert first.running_kernels == []

    second = await events.wait_for(lambda e: isinstance(e, AgentHeartbeat) and e.seq == 2)
    assert isinstance(second, AgentHeartbeat)
    assert second.boot_id == first.boot_id
    seqs = [e.seq for e in events.seen if isinstance(e, AgentHeartbeat)]
    assert seqs == sorted(seqs) and seqs[:2] == [1, 2]

    assert await client.call(first.rpc_addr, "ping", Empty()) == {"agent_id": agent.agent_id}


async def test_running_kernels_are_in_the_heartbeat(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    from tests.agent.conftest import run_kernel, spec

    kernel = spec(None, session_type="interactive")
    await run_kernel(client, agent.rpc_addr, events, kernel)
    beat = await events.wait_for(
        lambda e: isinstance(e, AgentHeartbeat) and kernel.kernel_id in e.running_kernels
    )
    assert isinstance(beat, AgentHeartbeat)
    await client.destroy_kernels(agent.rpc_addr, [kernel.kernel_id])
    await events.wait_kernel("kernel.terminated", kernel.kernel_id)


async def test_stop_announces_agent_stopping(agent: AgentDaemon, events: AgentEvents) -> None:
    await events.wait_for(lambda e: e.name == "agent.heartbeat")
    await agent.stop()
    stopping = await events.wait_for(lambda e: e.name == "agent.stopping")
    assert stopping.boot_id == agent.boot_id  # type: ignore[union-attr]
