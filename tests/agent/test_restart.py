"""An agent process restarted under its kernels: SIGTERM (detach) and SIGKILL leave them running,
the next start with the same id and work dir takes them over, and SIGINT still destroys them."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from sokovan.agent import kernel_proc
from sokovan.common.events import AgentHeartbeat, KernelRunning, KernelTerminated
from sokovan.common.rpc import AgentRPCClient, KernelSpec
from sokovan.common.settings import Settings
from tests.agent.agent_procs import kill_recorded_kernels
from tests.agent.conftest import AgentEvents, spec
from tests.agent.test_cli import agent_process

WAIT = 15.0


class Restartable:
    """One agent id and work dir, started as often as a test likes; its kernels are killed at the end."""

    def __init__(
        self, agent_id: str, tmp_path: Path, env: dict[str, str], settings: Settings, events: AgentEvents
    ) -> None:
        self.agent_id = agent_id
        self.work = tmp_path / "work"
        self.log = tmp_path / "agent.log"
        self.env, self.settings, self.events = env, settings, events
        self.args = ["--id", self.agent_id, "--rpc-port", "0", "--work-dir", str(self.work)]
        self.args += ["--heartbeat-interval", "0.3", "--kill-grace", "1"]

    @property
    def state_file(self) -> Path:
        return self.work / "agent-state.json"

    async def registered(self, after: set[str]) -> AgentHeartbeat:
        """The first heartbeat of a boot not in `after`."""
        beat = await self.events.wait_for(
            lambda e: isinstance(e, AgentHeartbeat) and e.boot_id not in after, WAIT
        )
        assert isinstance(beat, AgentHeartbeat)
        return beat


@pytest.fixture
async def restartable(
    tmp_path: Path, service_env: dict[str, str], settings: Settings, redis: aioredis.Redis
) -> AsyncIterator[Restartable]:
    agent_id = f"restart-{uuid.uuid4().hex[:8]}"
    agent = Restartable(agent_id, tmp_path, service_env, settings, AgentEvents(redis, settings, agent_id))
    try:
        yield agent
    finally:
        kill_recorded_kernels(agent.state_file)  # only what a test failed half-way left behind


async def start_kernels(
    client: AgentRPCClient, agent: Restartable, rpc_addr: str, *kernels: KernelSpec
) -> dict[str, int]:
    """Creates `kernels`; their pids once each runs."""
    await client.create_kernels(rpc_addr, list(kernels))
    pids = {}
    for kernel in kernels:
        running = await agent.events.wait_kernel("kernel.running", kernel.kernel_id, WAIT)
        assert isinstance(running, KernelRunning) and running.pid
        pids[kernel.kernel_id] = running.pid
    return pids


async def exit_recorded(agent: Restartable, kernel: KernelSpec) -> int:
    """Waits until the kernel's wrapper has recorded its exit code (while no agent watches it)."""
    async with asyncio.timeout(WAIT):
        while True:
            code = kernel_proc.read_exit_code(agent.work / kernel.kernel_id)
            if code is not None:
                return code
            await asyncio.sleep(0.05)


def terminated(agent: Restartable, kernel: KernelSpec) -> list[KernelTerminated]:
    return [
        e for e in agent.events.seen if isinstance(e, KernelTerminated) and e.kernel_id == kernel.kernel_id
    ]


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
async def test_a_restarted_agent_takes_over_its_running_kernels(restartable: Restartable, how: str) -> None:
    agent, events = restartable, restartable.events
    idle = spec(None, session_type="interactive")
    batch = spec("sleep 2; exit 3")
    quick = spec("sleep 0.5; exit 5")  # ends while no agent runs
    gated = spec("while [ ! -e go ]; do sleep 0.05; done; exit 7")  # ends when the test says so
    async with agent_process(agent.args, agent.env, agent.settings, agent.log) as (proc, client):
        first = await agent.registered(set())
        pids = await start_kernels(client, agent, first.rpc_addr, idle, batch, quick, gated)
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0
            await events.wait_for(lambda e: e.name == "agent.stopping", WAIT)
        else:
            proc.kill()
            await proc.wait()
    started_at = {k: kernel_proc.start_time(pid) for k, pid in pids.items()}
    assert kernel_proc.alive(pids[idle.kernel_id], started_at[idle.kernel_id])
    assert await exit_recorded(agent, quick) == 5
    assert all(terminated(agent, k) == [] for k in (idle, batch, quick, gated))  # nobody was told

    async with agent_process(agent.args, agent.env, agent.settings, agent.log) as (proc, client):
        second = await agent.registered({first.boot_id})
        assert second.seq == 1 and second.boot_id != first.boot_id
        assert idle.kernel_id in second.running_kernels and gated.kernel_id in second.running_kernels
        assert quick.kernel_id not in second.running_kernels
        ended = await events.wait_kernel("kernel.terminated", quick.kernel_id, WAIT)
        assert isinstance(ended, KernelTerminated) and (ended.exit_code, ended.reason) == (5, "exited")
        again = [e for e in events.seen if isinstance(e, KernelRunning) and e.kernel_id == idle.kernel_id]
        assert [e.pid for e in again] == [pids[idle.kernel_id]] * 2  # the same process, told again

        (agent.work / gated.kernel_id / "go").touch()
        ended = await events.wait_kernel("kernel.terminated", gated.kernel_id, WAIT)
        assert isinstance(ended, KernelTerminated) and (ended.exit_code, ended.reason) == (7, "exited")
        ended = await events.wait_kernel("kernel.terminated", batch.kernel_id, WAIT)
        assert isinstance(ended, KernelTerminated) and (ended.exit_code, ended.reason) == (3, "exited")

        both_ended = max(events.seen.index(e) for k in (gated, batch) for e in terminated(agent, k))
        later = await events.wait_for(
            lambda e: isinstance(e, AgentHeartbeat) and events.seen.index(e) > both_ended, WAIT
        )
        assert isinstance(later, AgentHeartbeat) and later.running_kernels == [idle.kernel_id]
        assert kernel_proc.alive(pids[idle.kernel_id], started_at[idle.kernel_id])
        assert (await client.logs(second.rpc_addr, idle.kernel_id)).kernel_id == idle.kernel_id

        proc.send_signal(signal.SIGINT)  # the usual stop: the kernel taken over is destroyed too
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    ended = await events.wait_kernel("kernel.terminated", idle.kernel_id, WAIT)
    assert isinstance(ended, KernelTerminated) and (ended.exit_code, ended.reason) == (143, "destroyed")
    assert not kernel_proc.alive(pids[idle.kernel_id], started_at[idle.kernel_id])
    assert all(len(terminated(agent, k)) == 1 for k in (idle, batch, quick, gated))
    assert kill_recorded_kernels(agent.state_file) == []


async def test_a_kernel_that_vanished_without_a_trace_is_lost(restartable: Restartable) -> None:
    agent, events = restartable, restartable.events
    doomed = spec(None, session_type="interactive")
    async with agent_process(agent.args, agent.env, agent.settings, agent.log) as (proc, client):
        first = await agent.registered(set())
        await start_kernels(client, agent, first.rpc_addr, doomed)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert kill_recorded_kernels(agent.state_file)  # SIGKILL of the whole group: no exit code recorded

    async with agent_process(agent.args, agent.env, agent.settings, agent.log):
        second = await agent.registered({first.boot_id})
        assert second.running_kernels == []
        ended = await events.wait_kernel("kernel.terminated", doomed.kernel_id, WAIT)
        assert isinstance(ended, KernelTerminated) and (ended.exit_code, ended.reason) == (None, "lost")
