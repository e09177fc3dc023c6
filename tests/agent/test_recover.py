"""Taking kernels over in-process: what a detached stop writes, and what a kernel taken over by a
new daemon still answers to (reconcile, destroy, its inference port)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from sokovan.agent import kernel_proc
from sokovan.agent.daemon import AgentConfig, AgentDaemon
from sokovan.agent.process_kernel import end_reason
from sokovan.agent.state_file import StateFile
from sokovan.common.events import KernelRunning, KernelTerminated
from sokovan.common.rpc import AgentRPCClient, ReconcileItem
from sokovan.common.settings import Settings
from tests.agent.agent_procs import kill_recorded_kernels, program_started
from tests.agent.conftest import AgentEvents, run_kernel, spec


@pytest.fixture
def config(tmp_path: Path) -> AgentConfig:
    return AgentConfig(
        agent_id=f"recover-{uuid.uuid4().hex[:8]}",
        rpc_port=0,
        work_dir=tmp_path / "work",
        kill_grace=1.0,
        heartbeat_interval=0.3,
    )


@pytest.fixture
async def daemons(config: AgentConfig) -> AsyncIterator[list[AgentDaemon]]:
    """The daemons a test starts (all on `config`); stopped, and their kernels killed, afterwards."""
    started: list[AgentDaemon] = []
    yield started
    for daemon in started:
        await daemon.stop()
    kill_recorded_kernels(config.resolved_state_file())


async def start(settings: Settings, config: AgentConfig, daemons: list[AgentDaemon]) -> AgentDaemon:
    daemon = AgentDaemon(settings, config)
    daemons.append(daemon)
    await daemon.start()
    return daemon


def recorded(config: AgentConfig) -> list[str]:
    return sorted(k.kernel_id for k in StateFile(config.resolved_state_file(), config.agent_id).load())


async def test_a_kernel_taken_over_keeps_its_port_and_answers_reconcile_and_destroy(
    settings: Settings,
    config: AgentConfig,
    daemons: list[AgentDaemon],
    redis: aioredis.Redis,
    client: AgentRPCClient,
) -> None:
    first = await start(settings, config, daemons)
    events = AgentEvents(redis, settings, config.agent_id)
    web, idle = spec("exec sleep 60", session_type="inference"), spec(None, session_type="interactive")
    running = await run_kernel(client, first.rpc_addr, events, web)
    assert isinstance(running, KernelRunning) and running.service_addr
    port = int(running.service_addr.rpartition(":")[2])
    started = await run_kernel(client, first.rpc_addr, events, idle)
    assert isinstance(started, KernelRunning) and started.pid
    await program_started(started.pid)  # so that a SIGTERM stops its program, recording 143
    assert recorded(config) == sorted([web.kernel_id, idle.kernel_id])  # written as each started

    await first.stop(detach=True)
    assert recorded(config) == sorted([web.kernel_id, idle.kernel_id])
    second = await start(settings, config, daemons)
    assert second.backend.running_kernels() == sorted([web.kernel_id, idle.kernel_id])
    assert port in second.backend.ports.reserved

    mark = len(events.seen)
    item = ReconcileItem(kernel_id=web.kernel_id, session_id=web.session_id, image="shell", phase="run")
    await client.reconcile(second.rpc_addr, [item])
    retold = await events.wait_for(
        lambda e: (
            isinstance(e, KernelRunning) and e.kernel_id == web.kernel_id and events.seen.index(e) >= mark
        )
    )
    assert isinstance(retold, KernelRunning)
    assert (retold.pid, retold.service_addr) == (running.pid, running.service_addr)

    await client.destroy_kernels(second.rpc_addr, [web.kernel_id], forced=True)
    ended = await events.wait_kernel("kernel.terminated", web.kernel_id)
    assert isinstance(ended, KernelTerminated) and (ended.exit_code, ended.reason) == (137, "destroyed")
    assert port not in second.backend.ports.reserved
    await client.destroy_kernels(second.rpc_addr, [idle.kernel_id])
    ended = await events.wait_kernel("kernel.terminated", idle.kernel_id)
    assert isinstance(ended, KernelTerminated) and (ended.exit_code, ended.reason) == (143, "destroyed")
    assert recorded(config) == []
    assert events.of_kernel(web.kernel_id).count("kernel.terminated") == 1


async def test_a_stop_without_detach_empties_the_state_file(
    settings: Settings,
    config: AgentConfig,
    daemons: list[AgentDaemon],
    redis: aioredis.Redis,
    client: AgentRPCClient,
) -> None:
    agent = await start(settings, config, daemons)
    events = AgentEvents(redis, settings, config.agent_id)
    idle = spec(None, session_type="interactive")
    running = await run_kernel(client, agent.rpc_addr, events, idle)
    assert isinstance(running, KernelRunning) and running.pid
    started = kernel_proc.start_time(running.pid)
    await agent.stop()
    assert recorded(config) == []
    assert not kernel_proc.alive(running.pid, started)


async def test_a_custom_state_file_and_a_foreign_one(
    settings: Settings, config: AgentConfig, daemons: list[AgentDaemon], tmp_path: Path
) -> None:
    config.state_file = tmp_path / "elsewhere" / "state.json"
    other = StateFile(config.state_file, "someone-else")
    other.save([])
    agent = await start(settings, config, daemons)
    assert agent.backend.running_kernels() == []  # another agent's file: nothing taken over
    assert config.state_file.exists()


@pytest.mark.parametrize(
    ("exit_code", "destroy_requested", "reason"),
    [
        (0, False, "exited"),
        (3, False, "exited"),
        (None, False, "lost"),
        (None, True, "destroyed"),
        (143, True, "destroyed"),
    ],
)
def test_end_reason(exit_code: int | None, destroy_requested: bool, reason: str) -> None:
    assert end_reason(exit_code, None, destroy_requested) == reason
