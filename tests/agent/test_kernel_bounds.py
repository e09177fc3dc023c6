"""The agent's bounds on its kernels, with real kernels: the log cap (the newest output kept), logs
and exit codes read without following a kernel's links, the work-dir cap, the retention of ended
kernels' directories, and a session's uid from its first kernel to after its last."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from sokovan.agent import kernel_proc
from sokovan.agent.daemon import AgentConfig, AgentDaemon
from sokovan.agent.isolation import IsolationOptions
from sokovan.common.events import KernelTerminated
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.settings import Settings
from sokovan.harness import reachable
from tests.agent.conftest import AgentEvents, spec

LOG_CAP = 64 * 1024
WORK_DIR_CAP = 1024 * 1024


def bounded_config(tmp_path: Path, keep_ended_kernels: float) -> AgentConfig:
    """An agent with small caps and housekeeping every 0.2 s."""
    options = IsolationOptions(
        max_log_bytes=LOG_CAP, max_work_dir_bytes=WORK_DIR_CAP, keep_ended_kernels=keep_ended_kernels
    )
    return AgentConfig(
        agent_id=f"bounds-{uuid.uuid4().hex[:8]}",
        rpc_port=0,
        work_dir=reachable(tmp_path / "work"),
        kill_grace=1.0,
        heartbeat_interval=0.5,
        isolation=options,
        housekeeping_interval=0.2,
    )


@pytest.fixture(params=[60.0], ids=["kept"])
async def bounded(
    settings: Settings, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[AgentDaemon]:
    """By default an ended kernel's directory is kept a minute, so that its logs can be read after its
    end whatever the load (with no retention, the 0.2 s sweep may remove them before the test reads
    them); the retention test asks for none."""
    daemon = AgentDaemon(settings, bounded_config(tmp_path, float(request.param)))
    await daemon.start()
    yield daemon
    await daemon.stop()


@pytest.fixture
def bounded_events(bounded: AgentDaemon, redis: aioredis.Redis, settings: Settings) -> AgentEvents:
    return AgentEvents(redis, settings, bounded.agent_id)


async def ended(events: AgentEvents, kernel_id: str, within: float = 20) -> KernelTerminated:
    event = await events.wait_kernel("kernel.terminated", kernel_id, within)
    assert isinstance(event, KernelTerminated)
    return event


async def test_a_log_past_its_cap_keeps_the_newest_output(
    bounded: AgentDaemon, bounded_events: AgentEvents, client: AgentRPCClient
) -> None:
    kernel = spec("i=0; while [ $i -lt 20000 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done")
    await client.create_kernels(bounded.rpc_addr, [kernel])
    assert (await ended(bounded_events, kernel.kernel_id)).exit_code == 0
    directory = bounded.work_dir / kernel.kernel_id
    sizes = [p.stat().st_size for p in directory.glob("stdout.log*")]
    assert sum(sizes) <= LOG_CAP and len(sizes) == 2  # 700 kB written, two generations kept
    logs = await client.logs(bounded.rpc_addr, kernel.kernel_id)
    assert logs.stdout.endswith("line-19999-xxxxxxxxxxxxxxxxxxxxxxxx\n")
    assert "line-0-" not in logs.stdout


async def test_a_kernel_cannot_make_the_agent_read_another_file_or_forge_its_code(
    bounded: AgentDaemon, bounded_events: AgentEvents, client: AgentRPCClient, tmp_path: Path
) -> None:
    private = tmp_path / "private"
    private.write_text("top-secret\n")
    private.chmod(0o600)
    kernel = spec(
        f"rm -f stdout.log stdout.log.1; ln -s {private} stdout.log; ln -s {private} stderr.log; "
        "echo 0 > exit-code; exit 5"
    )
    await client.create_kernels(bounded.rpc_addr, [kernel])
    assert (await ended(bounded_events, kernel.kernel_id)).exit_code == 5
    logs = await client.logs(bounded.rpc_addr, kernel.kernel_id)
    assert "top-secret" not in logs.stdout + logs.stderr
    directory = bounded.work_dir / kernel.kernel_id
    assert kernel_proc.read_exit_code(directory) == 5  # the wrapper's file replaced the kernel's
    (directory / kernel_proc.EXIT_FILE).unlink()
    os.symlink(private, directory / kernel_proc.EXIT_FILE)
    assert kernel_proc.read_exit_code(directory) is None


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("head -c 2000000 /dev/zero > big", "RLIMIT_FSIZE: no file past the cap"),
        (
            "i=0; while [ $i -lt 30 ]; do head -c 100000 /dev/zero > f$i; i=$((i+1)); done; exec sleep 1000",
            "the periodic check: many files past the cap together",
        ),
    ],
)
async def test_a_work_dir_past_its_cap_ends_the_kernel_with_sigxfsz(
    bounded: AgentDaemon, bounded_events: AgentEvents, client: AgentRPCClient, command: str, why: str
) -> None:
    kernel = spec(command)
    await client.create_kernels(bounded.rpc_addr, [kernel])
    event = await ended(bounded_events, kernel.kernel_id)
    assert (event.exit_code, event.reason) == (153, "exited"), why  # 128 + SIGXFSZ
    if "sleep" in command:
        logs = await client.logs(bounded.rpc_addr, kernel.kernel_id)
        assert f"work directory grew past {WORK_DIR_CAP} bytes" in logs.stderr


@pytest.mark.parametrize("bounded", [0.0], ids=["no-retention"], indirect=True)
async def test_an_ended_kernels_directory_is_removed_after_the_retention(
    bounded: AgentDaemon, bounded_events: AgentEvents, client: AgentRPCClient
) -> None:
    done, idle = spec("echo bye"), spec(None)
    await client.create_kernels(bounded.rpc_addr, [done, idle])
    await ended(bounded_events, done.kernel_id)
    async with asyncio.timeout(10):
        while (bounded.work_dir / done.kernel_id).exists():  # noqa: ASYNC110 (a directory, not an event)
            await asyncio.sleep(0.1)
    assert (bounded.work_dir / idle.kernel_id).is_dir()  # a live kernel's directory stays
    assert bounded.state_file.exists()
    with pytest.raises(Exception, match="unknown kernel"):
        await client.logs(bounded.rpc_addr, done.kernel_id)


async def test_a_sessions_uid_from_its_first_kernel_to_after_its_last(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient, settings: Settings
) -> None:
    if os.geteuid() != 0:
        pytest.skip("kernels run under a uid per session only when the agent runs as root; the tests do not")
    uids = agent.backend.isolation.uids
    session = f"s-{uuid.uuid4().hex[:12]}"
    first, second, other = spec(None, session_id=session), spec(None, session_id=session), spec(None)
    await client.create_kernels(agent.rpc_addr, [first, second, other])
    for kernel in (first, second, other):
        await events.wait_kernel("kernel.running", kernel.kernel_id)
    uid = uids.of(session)
    assert uid is not None and uid == uids.of(first.session_id) and uid != uids.of(other.session_id)
    directory = agent.work_dir / first.kernel_id
    assert (directory.stat().st_uid, directory.stat().st_mode & 0o777) == (uid, 0o700)

    # The agent restarts (leaving the kernels running): the session keeps its uid.
    await agent.stop(detach=True)
    again = AgentDaemon(settings, agent.config)
    await again.start()
    try:
        assert again.backend.isolation.uids.of(session) == uid
        await client.destroy_kernels(again.rpc_addr, [first.kernel_id])
        await events.wait_kernel("kernel.terminated", first.kernel_id)
        assert again.backend.isolation.uids.of(session) == uid  # its second kernel still runs
        assert directory.stat().st_uid == os.geteuid()  # an ended kernel's directory is the agent's
        await client.destroy_kernels(again.rpc_addr, [second.kernel_id])
        await events.wait_kernel("kernel.terminated", second.kernel_id)
        assert again.backend.isolation.uids.of(session) is None
    finally:
        await again.stop()  # the fixture's agent was stopped above: its own stop is a no-op
