"""`sokovan agent` as a real process: start-up checks, registration, SIGINT."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from sokovan.common.events import AgentHeartbeat, KernelRunning, KernelTerminated
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.settings import Settings
from tests.agent.agent_procs import stop_agent
from tests.agent.conftest import AgentEvents, spec

SOKOVAN = str(Path(sys.executable).parent / "sokovan")


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SOKOVAN, "agent", *args], env=env, capture_output=True, text=True, timeout=60)


def run_cli_with_config(
    args: list[str], config: str | None, tmp_path: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """`sokovan agent --rpc-port 0 <args>`, with `config` (TOML) as its config file when given."""
    if config is not None:
        (tmp_path / "agent.toml").write_text(config + "\n")
        args = [*args, "--config", str(tmp_path / "agent.toml")]
    return run_cli(["--rpc-port", "0", *args], env)


@asynccontextmanager
async def agent_process(
    args: list[str], env: dict[str, str], settings: Settings, log: Path | None = None
) -> AsyncIterator[tuple[asyncio.subprocess.Process, AgentRPCClient]]:
    """`sokovan agent <args>` (its output to `log`, or discarded) and an RPC client; when the block
    ends the client is closed and the process, if it still runs, stopped with SIGINT (its kernels
    are destroyed)."""
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if log else asyncio.subprocess.DEVNULL
    try:
        proc = await asyncio.create_subprocess_exec(SOKOVAN, "agent", *args, env=env, stdout=out, stderr=out)
    finally:
        if log:
            os.close(out)
    client = AgentRPCClient(settings.cluster_secret or "")
    try:
        yield proc, client
    finally:
        await client.close()
        await stop_agent(proc)


def test_refuses_to_start_without_cluster_secret(service_env: dict[str, str]) -> None:
    env = {k: v for k, v in service_env.items() if k != "SOKOVAN_CLUSTER_SECRET"}
    result = run_cli(["--rpc-port", "0"], env)
    assert result.returncode != 0
    assert "SOKOVAN_CLUSTER_SECRET" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "config", "message"),
    [
        (["--slots", "cpu=lots"], None, "bad --slots"),
        (["--slots", "cpu"], None, "expected NAME=AMOUNT"),
        ([], 'slots = "gpu=-1"', "bad --slots"),
        (["--images", "/nonexistent/images.toml"], None, "image catalog"),
        ([], 'images = "/nonexistent/images.toml"', "image catalog"),
        ([], "heartbeat_interval = 'abc'", "config key 'heartbeat_interval'"),
        ([], "kill_grace = -1", "kill grace must not be negative"),
        ([], "not toml at all [", "not valid TOML"),
    ],
)
def test_refuses_bad_options(
    service_env: dict[str, str], tmp_path: Path, args: list[str], config: str | None, message: str
) -> None:
    result = run_cli_with_config(args, config, tmp_path, service_env)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr


async def test_agent_process_registers_serves_and_stops_on_sigint(
    service_env: dict[str, str], settings: Settings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    agent_id = f"cli-{uuid.uuid4().hex[:8]}"
    (tmp_path / "images.toml").write_text('[images.tools]\npath = ["/opt/tools/bin"]\nenv = { TOOL = "1" }\n')
    (tmp_path / "agent.toml").write_text(
        f'[agent]\nid = "{agent_id}"\nscaling_group = "gpu"\nslots = "cpu=3,mem=2g"\n'
        f'images = "{tmp_path / "images.toml"}"\nheartbeat_interval = 0.5\n'
    )
    args = ["--config", str(tmp_path / "agent.toml"), "--rpc-port", "0"]
    args += ["--work-dir", str(tmp_path / "work"), "--kill-grace", "1"]
    events = AgentEvents(redis, settings, agent_id)
    async with agent_process(args, service_env, settings) as (proc, client):
        beat = await events.wait_for(lambda e: e.name == "agent.heartbeat")
        assert isinstance(beat, AgentHeartbeat)
        assert (beat.seq, beat.scaling_group) == (1, "gpu")
        assert beat.available_slots == {"cpu": "3", "mem": str(2 * 2**30)}
        assert beat.images == ["python:3", "shell", "tools"]

        idle, dump = spec(None, session_type="interactive"), spec("env")
        await client.create_kernels(beat.rpc_addr, [idle, dump])
        running = await events.wait_kernel("kernel.running", idle.kernel_id)
        assert isinstance(running, KernelRunning) and running.pid
        await events.wait_kernel("kernel.terminated", dump.kernel_id)
        output = (await client.logs(beat.rpc_addr, dump.kernel_id)).stdout
        assert f"SOKOVAN_KERNEL_ID={dump.kernel_id}" in output
        assert "SOKOVAN_CLUSTER_SECRET" not in output  # the agent's own environment stays out

        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 30) == 0

    await events.wait_for(lambda e: e.name == "agent.stopping")
    terminated = await events.wait_kernel("kernel.terminated", idle.kernel_id)
    assert isinstance(terminated, KernelTerminated) and terminated.reason == "destroyed"
    with pytest.raises(ProcessLookupError):
        os.kill(running.pid, 0)
    names = [e.name for e in events.seen]
    assert names.index("agent.stopping") < len(names) - 1  # the kernel's end follows the announcement
