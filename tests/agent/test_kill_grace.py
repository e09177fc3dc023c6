"""A destroy's grace (`DestroyKernelsRequest.grace`): SIGTERM, SIGKILL only after the grace the
manager sends (a preemption victim's `kill_grace`), not the agent's own `--kill-grace`.

The agents here have a kill grace of 0, so a destroy that fell back to it would SIGKILL at once:
only the request's grace lets a TERM-trapping kernel finish its trap. No upper bound on timings:
a kernel is shown alive well within its grace, and ended (by SIGKILL) some time after it.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from pydantic import ValidationError

from sokovan.agent.daemon import AgentDaemon
from sokovan.common.events import AgentHeartbeat, KernelRunning, KernelTerminated
from sokovan.common.rpc import AgentRPCClient, DestroyKernelsRequest
from sokovan.common.settings import Settings
from sokovan.harness import reachable
from tests.agent.conftest import AgentEvents, post_rpc, signed, spec
from tests.agent.test_cli import agent_process

# Traps TERM, takes a second over it (a `sleep` started after the signal, so not signalled),
# prints a line and exits with a code of its own.
TRAPS_TERM = "trap 'sleep 1; echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.2; done"
IGNORES_TERM = "trap '' TERM; echo ready; while :; do sleep 0.1; done"
SIGKILLED = 128 + 9


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def started(client: AgentRPCClient, addr: str, events: AgentEvents, command: str) -> tuple[str, int]:
    """Starts a kernel running `command` and waits for its "ready": its id and pid."""
    kernel = spec(command)
    await client.create_kernels(addr, [kernel])
    running = await events.wait_kernel("kernel.running", kernel.kernel_id)
    assert isinstance(running, KernelRunning) and running.pid
    async with asyncio.timeout(10):
        while True:
            if "ready" in (await client.logs(addr, kernel.kernel_id)).stdout:
                break
            await asyncio.sleep(0.05)
    return kernel.kernel_id, running.pid


async def terminated(events: AgentEvents, kernel_id: str, within: float = 30) -> KernelTerminated:
    event = await events.wait_kernel("kernel.terminated", kernel_id, within=within)
    assert isinstance(event, KernelTerminated)
    return event


async def test_agent_process_honours_the_destroy_grace(
    service_env: dict[str, str], settings: Settings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    """`sokovan agent --kill-grace 0`: a TERM-trapping kernel destroyed with a 30 s grace runs its
    trap (its line in its log, its own exit code); a TERM-ignoring one destroyed with a 3 s grace
    is still alive a moment after the SIGTERM and SIGKILLed once the grace has passed."""
    agent_id = f"grace-{uuid.uuid4().hex[:8]}"
    args = ["--id", agent_id, "--rpc-port", "0", "--heartbeat-interval", "0.5", "--kill-grace", "0"]
    args += ["--work-dir", str(reachable(tmp_path / "work"))]
    events = AgentEvents(redis, settings, agent_id)
    async with agent_process(args, service_env, settings) as (_proc, client):
        beat = await events.wait_for(lambda e: e.name == "agent.heartbeat")
        assert isinstance(beat, AgentHeartbeat)
        addr = beat.rpc_addr

        trapping, _ = await started(client, addr, events, TRAPS_TERM)
        await client.destroy_kernels(addr, [trapping], grace=30)
        ended = await terminated(events, trapping)
        assert (ended.exit_code, ended.reason) == (7, "destroyed")
        assert "got TERM" in (await client.logs(addr, trapping)).stdout

        ignoring, pid = await started(client, addr, events, IGNORES_TERM)
        grace = 3.0
        asked = time.monotonic()
        await client.destroy_kernels(addr, [ignoring], grace=grace)
        await asyncio.sleep(0.5)
        assert alive(pid)
        assert "kernel.terminated" not in events.of_kernel(ignoring)
        ended = await terminated(events, ignoring)
        assert time.monotonic() - asked >= grace  # never before the grace
        assert (ended.exit_code, ended.reason) == (SIGKILLED, "destroyed")
        assert not alive(pid)


async def test_a_destroy_within_the_grace_neither_restarts_nor_shortens_it(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    agent.backend.kill_grace = 0.0
    kernel_id, pid = await started(client, agent.rpc_addr, events, IGNORES_TERM)
    grace = 3.0
    asked = time.monotonic()
    await client.destroy_kernels(agent.rpc_addr, [kernel_id], grace=grace)
    killer = agent.backend._live[kernel_id].killer
    assert killer is not None

    await client.destroy_kernels(agent.rpc_addr, [kernel_id], grace=0)  # not shortened ...
    await client.destroy_kernels(agent.rpc_addr, [kernel_id])  # ... nor by the agent's own 0
    await client.destroy_kernels(agent.rpc_addr, [kernel_id], grace=3600)  # nor restarted
    await asyncio.sleep(0.5)
    assert alive(pid)
    assert agent.backend._live[kernel_id].killer is killer

    ended = await terminated(events, kernel_id)
    assert time.monotonic() - asked >= grace
    assert (ended.exit_code, ended.reason) == (SIGKILLED, "destroyed")
    assert events.of_kernel(kernel_id) == ["kernel.running", "kernel.terminated"]


async def test_a_forced_destroy_within_the_grace_kills_at_once(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    kernel_id, pid = await started(client, agent.rpc_addr, events, IGNORES_TERM)
    await client.destroy_kernels(agent.rpc_addr, [kernel_id], grace=3600)
    await asyncio.sleep(0.3)
    assert alive(pid)
    await client.destroy_kernels(agent.rpc_addr, [kernel_id], forced=True)
    ended = await terminated(events, kernel_id, within=10)  # never the hour of its grace
    assert (ended.exit_code, ended.reason) == (SIGKILLED, "destroyed")
    assert not alive(pid)


async def test_a_zero_grace_kills_right_after_the_sigterm(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    agent.backend.kill_grace = 3600.0  # the agent's own grace would outlast the test
    kernel_id, _ = await started(client, agent.rpc_addr, events, IGNORES_TERM)
    await client.destroy_kernels(agent.rpc_addr, [kernel_id], grace=0)
    ended = await terminated(events, kernel_id, within=10)
    assert (ended.exit_code, ended.reason) == (SIGKILLED, "destroyed")


async def test_without_a_grace_the_agents_own_applies(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    """An old manager's destroy (no `grace` in the body) still works, with `--kill-grace`."""
    agent.backend.kill_grace = 30.0
    kernel_id, _ = await started(client, agent.rpc_addr, events, TRAPS_TERM)
    body = json.dumps({"kernel_ids": [kernel_id]}).encode()
    status, answer = await post_rpc(
        agent.rpc_addr, "destroy_kernels", body, signed(agent, body, method="destroy_kernels")
    )
    assert (status, answer) == (200, {"accepted": [kernel_id]})
    ended = await terminated(events, kernel_id)
    assert (ended.exit_code, ended.reason) == (7, "destroyed")


@pytest.mark.parametrize(
    "grace", ["-1", "3600.5", "1e400", "NaN", "Infinity", '"soon"', '"30"', "[1]", "true", "{}"]
)
async def test_a_grace_out_of_range_is_a_400_and_stops_nothing(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient, grace: str
) -> None:
    kernel_id, pid = await started(client, agent.rpc_addr, events, IGNORES_TERM)
    body = f'{{"kernel_ids": ["{kernel_id}"], "grace": {grace}}}'.encode()
    status, answer = await post_rpc(
        agent.rpc_addr, "destroy_kernels", body, signed(agent, body, method="destroy_kernels")
    )
    assert status == 400
    assert "grace" in answer["error"]
    assert alive(pid) and agent.backend.running_kernels() == [kernel_id]
    assert events.of_kernel(kernel_id) == ["kernel.running"]


@pytest.mark.parametrize("grace", [-0.1, 3601, float("inf"), float("nan")])
def test_the_client_refuses_a_grace_out_of_range(grace: float) -> None:
    with pytest.raises(ValidationError):
        DestroyKernelsRequest(kernel_ids=["k"], grace=grace)


@pytest.mark.parametrize("grace", [None, 0, 0.5, 30, 3600])
def test_a_grace_in_range_is_taken(grace: float | None) -> None:
    assert DestroyKernelsRequest(kernel_ids=["k"], grace=grace).grace == grace
