"""Attacks from inside a kernel against a real `sokovan agent` process: reading every process's
environment, `kill -9 -1`, reading another session's files; and the secret file's checks."""

from __future__ import annotations

import asyncio
import os
import stat
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from sokovan.agent import kernel_proc
from sokovan.common.events import AgentHeartbeat, KernelRunning, KernelTerminated
from sokovan.common.settings import Settings
from sokovan.harness import reachable
from tests.agent.conftest import AgentEvents, Empty, spec
from tests.agent.test_cli import agent_process, run_cli

SNOOP = "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; echo ==env==; env; echo ==done=="


def uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


def program_of(wrapper: int) -> int:
    return int(Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text().split()[0])


def secret_file(tmp_path: Path, secret: str, mode: int = 0o600) -> Path:
    path = tmp_path / "secret"
    path.write_text(secret + "\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize("secret_in", ["environment", "file"])
async def test_a_kernel_reading_every_environment_finds_no_secret_and_no_database_url(
    service_env: dict[str, str], settings: Settings, redis: aioredis.Redis, tmp_path: Path, secret_in: str
) -> None:
    secret = settings.cluster_secret or ""
    env = {**service_env, "SOKOVAN_DB_URL": settings.db_url}
    args = ["--id", f"iso-{uuid.uuid4().hex[:8]}", "--rpc-port", "0", "--heartbeat-interval", "0.5"]
    args += ["--work-dir", str(reachable(tmp_path / "work")), "--kill-grace", "1"]
    if secret_in == "file":
        env.pop("SOKOVAN_CLUSTER_SECRET")
        args += ["--secret-file", str(secret_file(tmp_path, secret))]
    agent_id = args[1]
    events = AgentEvents(redis, settings, agent_id)
    async with agent_process(args, env, settings) as (_proc, client):
        beat = await events.wait_for(lambda e: e.name == "agent.heartbeat")
        assert isinstance(beat, AgentHeartbeat)
        idle, snoop = spec(None), spec(SNOOP)  # a kernel of another session runs meanwhile
        await client.create_kernels(beat.rpc_addr, [idle, snoop])
        await events.wait_kernel("kernel.running", idle.kernel_id)
        ended = await events.wait_kernel("kernel.terminated", snoop.kernel_id)
        assert isinstance(ended, KernelTerminated) and ended.exit_code == 0
        output = (tmp_path / "work" / snoop.kernel_id / kernel_proc.STDOUT).read_text(errors="replace")
    assert f"SOKOVAN_KERNEL_ID={snoop.kernel_id}" in output and "==done==" in output
    for leak in (secret, settings.db_url, settings.redis_url, "SOKOVAN_CLUSTER_SECRET", "SOKOVAN_DB_URL"):
        assert leak not in output


async def test_kill_minus_one_from_a_session_leaves_the_agent_and_other_sessions_running(
    service_env: dict[str, str], settings: Settings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("kernels run under a uid per session only when the agent runs as root; the tests do not")
    work = reachable(tmp_path / "work")
    agent_id = f"iso-{uuid.uuid4().hex[:8]}"
    args = ["--id", agent_id, "--rpc-port", "0", "--heartbeat-interval", "0.5", "--work-dir", str(work)]
    events = AgentEvents(redis, settings, agent_id)
    async with agent_process([*args, "--kill-grace", "1"], service_env, settings) as (proc, client):
        beat = await events.wait_for(lambda e: e.name == "agent.heartbeat")
        assert isinstance(beat, AgentHeartbeat)
        addr = beat.rpc_addr
        victim = spec("echo b-log-line; echo b-private > private.txt; exec sleep 1000")
        await client.create_kernels(addr, [victim])
        running_b = await events.wait_kernel("kernel.running", victim.kernel_id)
        assert isinstance(running_b, KernelRunning) and running_b.pid
        b_dir = work / victim.kernel_id
        async with asyncio.timeout(10):
            while not (b_dir / "private.txt").exists():  # noqa: ASYNC110 (a file, not an event)
                await asyncio.sleep(0.05)

        session_a = f"s-{uuid.uuid4().hex[:12]}"
        reader = spec(
            f"id -u; cat {b_dir}/private.txt {b_dir}/stdout.log; ls {b_dir}; echo ==read==; sleep 1000",
            session_id=session_a,
        )
        killer = spec('sleep 0.5; [ "$(id -u)" != 0 ] && kill -9 -1; echo survived', session_id=session_a)
        await client.create_kernels(addr, [reader, killer])
        running_a = await events.wait_kernel("kernel.running", reader.kernel_id)
        ended = await events.wait_kernel("kernel.terminated", killer.kernel_id)
        assert isinstance(ended, KernelTerminated) and ended.exit_code == 0  # kill(-1) spares the caller
        reader_end = await events.wait_kernel("kernel.terminated", reader.kernel_id)
        assert isinstance(reader_end, KernelTerminated) and reader_end.exit_code == 137  # same uid: killed

        assert proc.returncode is None and kernel_proc.alive(running_b.pid, None)
        assert (await client.call(addr, "ping", Empty()))["agent_id"] == agent_id
        assert events.of_kernel(victim.kernel_id) == ["kernel.running"]
        b_uid = uid_of(program_of(running_b.pid))
        assert b_uid != 0 and b_uid != uid_of(os.getpid())
        a_output = (work / reader.kernel_id / kernel_proc.STDOUT).read_text()
        a_uid = int(a_output.split()[0])
        assert a_uid not in (0, b_uid) and running_a is not None
        assert (
            "==read==" in a_output
            and "Permission denied" in (work / reader.kernel_id / "stderr.log").read_text()
        )
        assert "b-private" not in a_output and "b-log-line" not in a_output
        assert stat.S_IMODE(b_dir.stat().st_mode) == 0o700 and b_dir.stat().st_uid == b_uid
        log = b_dir / kernel_proc.STDOUT
        assert (log.stat().st_uid, stat.S_IMODE(log.stat().st_mode)) == (0, 0o600)


@pytest.mark.parametrize(
    ("mode", "content", "message"),
    [
        (0o644, "s3cret", "readable or writable by others"),
        (0o602, "s3cret", "readable or writable by others"),
        (0o600, "  \n", "is empty"),
        (None, "", "cannot read the secret file"),
    ],
)
def test_an_unsafe_or_empty_secret_file_is_refused(
    service_env: dict[str, str], tmp_path: Path, mode: int | None, content: str, message: str
) -> None:
    path = tmp_path / "secret"
    if mode is not None:
        path.write_text(content)
        path.chmod(mode)
    env = {k: v for k, v in service_env.items() if k != "SOKOVAN_CLUSTER_SECRET"}
    result = run_cli(["--rpc-port", "0", "--work-dir", str(tmp_path / "w"), "--secret-file", str(path)], env)
    assert result.returncode != 0
    assert message in result.stderr and "refuses to start" in result.stderr
    assert "Traceback" not in result.stderr
