"""A hollow fleet with a state file hands its timer kernels to its next start: after a detached stop
(SIGTERM) or a SIGKILL, the same agent ids come back with their kernels, timers running on."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path

import aiohttp
import redis.asyncio as aioredis

from sokovan.agent.hollow_state import HollowStateFile
from sokovan.common.events import AgentHeartbeat, KernelRunning, KernelTerminated
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.settings import Settings
from sokovan.harness import free_port
from tests.agent.conftest import AgentEvents, FleetFactory, run_kernel, spec
from tests.agent.test_cli import agent_process


def beats_of(events: AgentEvents, boot_id: str) -> list[AgentHeartbeat]:
    return [e for e in events.seen if isinstance(e, AgentHeartbeat) and e.boot_id == boot_id]


async def test_a_detached_fleet_hands_its_kernels_to_the_next_start(
    fleet_factory: FleetFactory,
    redis: aioredis.Redis,
    settings: Settings,
    client: AgentRPCClient,
    tmp_path: Path,
) -> None:
    path = tmp_path / "fleet-state.json"
    first = await fleet_factory(2, state_file=path, heartbeat_interval=0.3)
    events = AgentEvents(redis, settings, None)
    idle, short, long = spec(None), spec("sleep 0.5"), spec("sleep 2.5")
    web = spec(None, session_type="inference")
    created = time.time()
    for kernel in (idle, short, long):
        await run_kernel(client, first.rpc_addr, events, kernel, agent_id="hollow-0000")
    await run_kernel(client, first.rpc_addr, events, web, agent_id="hollow-0001")

    await first.stop(detach=True)
    ours = set(first.agents)  # the streams also hold the events of agents that earlier tests ran
    await events.wait_for(
        lambda _: len([e for e in events.seen if e.name == "agent.stopping" and e.agent_id in ours]) == 2
    )
    assert not any(isinstance(e, KernelTerminated) for e in events.seen)
    kept = HollowStateFile(path).load()
    assert sorted(k.kernel_id for k in kept["hollow-0000"]) == sorted(
        [idle.kernel_id, short.kernel_id, long.kernel_id]
    )
    assert [(k.kernel_id, k.serves) for k in kept["hollow-0001"]] == [(web.kernel_id, True)]
    await asyncio.sleep(max(0.0, created + 0.7 - time.time()))  # `short` runs out while no fleet runs

    second = await fleet_factory(2, state_file=path, heartbeat_interval=0.3)
    new_boot = second.agents["hollow-0000"].boot_id
    ended = await events.wait_kernel("kernel.terminated", short.kernel_id)
    assert isinstance(ended, KernelTerminated) and (ended.exit_code, ended.reason) == (0, "exited")
    beat = await events.wait_for(
        lambda _: any(idle.kernel_id in b.running_kernels for b in beats_of(events, new_boot))
    )
    assert beat is not None
    ended = await events.wait_kernel("kernel.terminated", long.kernel_id, within=10)
    assert isinstance(ended, KernelTerminated) and ended.exit_code == 0
    assert ended.at.timestamp() >= created + 2.0  # its own time, not restarted from zero

    assert second.agents["hollow-0001"].running_kernels() == [web.kernel_id]
    addr = f"http://{second.rpc_addr}/kernels/{web.kernel_id}/health"
    async with aiohttp.ClientSession() as http, http.get(addr) as resp:
        assert resp.status == 200
    await client.destroy_kernels(second.rpc_addr, [idle.kernel_id], agent_id="hollow-0000")
    ended = await events.wait_kernel("kernel.terminated", idle.kernel_id)
    assert isinstance(ended, KernelTerminated) and ended.reason == "destroyed"

    await second.stop()  # not detached: the kernels end, and the file keeps none
    assert HollowStateFile(path).load() == {}
    ended = await events.wait_kernel("kernel.terminated", web.kernel_id)
    assert isinstance(ended, KernelTerminated) and ended.reason == "destroyed"


async def test_a_killed_fleet_process_comes_back_with_its_kernels(
    service_env: dict[str, str], settings: Settings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    prefix = f"hrst{uuid.uuid4().hex[:6]}"
    path = tmp_path / "fleet-state.json"
    args = ["--simulate", "2", "--id", prefix, "--rpc-port", str(free_port()), "--heartbeat-interval", "0.3"]
    args += ["--state-file", str(path)]
    events = AgentEvents(redis, settings, None)
    idle = spec(None, session_type="interactive")
    async with agent_process(args, service_env, settings) as (proc, client):
        beat = await events.wait_for(
            lambda e: isinstance(e, AgentHeartbeat) and e.agent_id == f"{prefix}-0001"
        )
        assert isinstance(beat, AgentHeartbeat)
        await run_kernel(client, beat.rpc_addr, events, idle, agent_id=f"{prefix}-0001")
        await asyncio.sleep(1.0)  # the file follows within SAVE_EVERY
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    first_boot = beat.boot_id

    async with agent_process(args, service_env, settings) as (proc, client):
        again = await events.wait_for(
            lambda e: (
                isinstance(e, AgentHeartbeat) and e.agent_id == f"{prefix}-0001" and e.boot_id != first_boot
            )
        )
        assert isinstance(again, AgentHeartbeat) and (again.seq, again.running_kernels) == (
            1,
            [idle.kernel_id],
        )
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    ended = await events.wait_kernel("kernel.terminated", idle.kernel_id)
    assert isinstance(ended, KernelTerminated) and ended.reason == "destroyed"
    assert HollowStateFile(path).load() == {}
    assert [
        e.name for e in events.seen if isinstance(e, KernelRunning) and e.kernel_id == idle.kernel_id
    ] == ["kernel.running"]
