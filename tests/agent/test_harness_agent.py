"""The harness's `AgentProc`: stopped with SIGINT (its kernels go with it), `detach()` (SIGTERM)
and `kill()` (SIGKILL) leave the kernels for the next `start()` to take over."""

from __future__ import annotations

import uuid
from pathlib import Path

import redis.asyncio as aioredis

from sokovan.agent import kernel_proc
from sokovan.common.events import AgentHeartbeat, KernelRunning, KernelTerminated
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.settings import Settings
from sokovan.harness import AgentProc
from tests.agent.agent_procs import kill_recorded_kernels
from tests.agent.conftest import AgentEvents, run_kernel, spec

WAIT = 15.0


async def test_agent_proc_detach_kill_and_stop(
    service_env: dict[str, str],
    settings: Settings,
    redis: aioredis.Redis,
    client: AgentRPCClient,
    tmp_path: Path,
) -> None:
    agent_id = f"harness-{uuid.uuid4().hex[:8]}"
    work = tmp_path / "work"
    agent = AgentProc(
        service_env,
        tmp_path,
        agent_id,
        work_dir=work,
        extra=["--heartbeat-interval", "0.3", "--kill-grace", "1"],
    )
    events = AgentEvents(redis, settings, agent_id)
    boots: set[str] = set()

    async def started() -> AgentHeartbeat:
        agent.start()
        beat = await events.wait_for(lambda e: isinstance(e, AgentHeartbeat) and e.boot_id not in boots, WAIT)
        assert isinstance(beat, AgentHeartbeat)
        boots.add(beat.boot_id)
        return beat

    try:
        beat = await started()
        kernel = spec(None, session_type="interactive")
        running = await run_kernel(client, beat.rpc_addr, events, kernel)
        assert isinstance(running, KernelRunning) and running.pid
        pid, start = running.pid, kernel_proc.start_time(running.pid)

        assert agent.detach() == 0
        assert agent.failure() is None  # stopped on purpose
        assert kernel_proc.alive(pid, start)
        beat = await started()
        assert beat.running_kernels == [kernel.kernel_id]

        agent.kill()
        assert agent.failure() is None
        assert kernel_proc.alive(pid, start)
        beat = await started()
        assert beat.running_kernels == [kernel.kernel_id]

        agent.stop()  # SIGINT: the kernel is destroyed
        assert agent.proc is not None and agent.proc.returncode == 0
        ended = await events.wait_kernel("kernel.terminated", kernel.kernel_id, WAIT)
        assert isinstance(ended, KernelTerminated) and ended.reason == "destroyed"
        assert not kernel_proc.alive(pid, start)
        assert "agent.kernels_left_running" in agent.log_text()
    finally:
        agent.stop()
        kill_recorded_kernels(work / "agent-state.json")
