"""`sokovan agent --simulate N` as a real process: options, registration, RPC, SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import uuid

import pytest
import redis.asyncio as aioredis

from sokovan.common.events import AgentHeartbeat, KernelTerminated
from sokovan.common.settings import Settings
from tests.agent.conftest import AgentEvents, Empty, run_kernel, spec
from tests.agent.test_cli import agent_process, run_cli


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--simulate", "0"], "at least 1 agent"),
        (["--simulate", "2", "--pull-failure-rate", "1.5"], "between 0 and 1"),
        (["--simulate", "2", "--pull-delay", "-1"], "must not be negative"),
        (["--simulate", "2", "--slots", "cpu=lots"], "bad --slots"),
        (["--simulate", "2", "--heartbeat-interval", "0"], "heartbeat interval must be positive"),
    ],
)
def test_refuses_bad_simulate_options(service_env: dict[str, str], args: list[str], message: str) -> None:
    result = run_cli(["--rpc-port", "0", *args], service_env)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr


async def test_simulated_fleet_registers_serves_and_stops_on_sigterm(
    service_env: dict[str, str], settings: Settings, redis: aioredis.Redis
) -> None:
    prefix = f"sim{uuid.uuid4().hex[:6]}"
    ids = [f"{prefix}-000{i}" for i in range(3)]
    args = ["--simulate", "3", "--id", prefix, "--rpc-port", "0", "--slots", "cpu=8,mem=16g"]
    events = AgentEvents(redis, settings, None)
    async with agent_process([*args, "--heartbeat-interval", "0.5"], service_env, settings) as (proc, client):
        await events.wait_for(
            lambda _: {e.agent_id for e in events.seen if isinstance(e, AgentHeartbeat)} >= set(ids)
        )
        # The stream is this run's: beats of fleets that earlier tests started are in it too.
        beats = [e for e in events.seen if isinstance(e, AgentHeartbeat) and e.seq == 1 and e.agent_id in ids]
        assert sorted(b.agent_id for b in beats) == ids
        assert len({b.rpc_addr for b in beats}) == 1
        assert beats[0].available_slots == {"cpu": "8", "mem": str(16 * 2**30)}
        rpc_addr = beats[0].rpc_addr

        assert await client.call(rpc_addr, "ping", Empty(), ids[2]) == {"agent_id": ids[2]}
        idle = spec(None, session_type="interactive")
        await run_kernel(client, rpc_addr, events, idle, agent_id=ids[1])

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0

    await events.wait_for(
        lambda _: {e.agent_id for e in events.seen if e.name == "agent.stopping"} >= set(ids)
    )
    terminated = await events.wait_kernel("kernel.terminated", idle.kernel_id)
    assert isinstance(terminated, KernelTerminated)
    assert (terminated.agent_id, terminated.reason) == (ids[1], "destroyed")
