"""Kernels as OS processes: create, exit, logs, destroy, environment, image checks."""

from __future__ import annotations

import asyncio
import os

import pytest

from sokovan.agent.daemon import AgentDaemon
from sokovan.common.events import (
    KernelCreationFailed,
    KernelImagePullFailed,
    KernelRunning,
    KernelTerminated,
)
from sokovan.common.rpc import AgentRPCClient, RPCError
from tests.agent.conftest import AgentEvents, run_kernel, spec


def assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def wait_for_output(client: AgentRPCClient, agent: AgentDaemon, kernel_id: str, text: str) -> None:
    async with asyncio.timeout(10):
        while True:
            logs = await client.logs(agent.rpc_addr, kernel_id)
            if text in logs.stdout:
                return
            await asyncio.sleep(0.05)


async def test_batch_kernel_runs_exits_zero_and_keeps_its_output(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    kernel = spec("echo hello; echo oops >&2")
    accepted = await client.create_kernels(agent.rpc_addr, [kernel])
    assert accepted.accepted == [kernel.kernel_id]

    running = await events.wait_kernel("kernel.running", kernel.kernel_id)
    terminated = await events.wait_kernel("kernel.terminated", kernel.kernel_id)
    assert isinstance(running, KernelRunning) and running.pid
    assert running.session_id == kernel.session_id
    assert isinstance(terminated, KernelTerminated)
    assert (terminated.exit_code, terminated.reason) == (0, "exited")
    assert events.of_kernel(kernel.kernel_id) == ["kernel.running", "kernel.terminated"]
    assert_gone(running.pid)

    logs = await client.logs(agent.rpc_addr, kernel.kernel_id)
    assert logs.kernel_id == kernel.kernel_id
    assert logs.stdout == "hello\n"
    assert logs.stderr == "oops\n"
    assert (agent.work_dir / kernel.kernel_id / "stdout.log").exists()


@pytest.mark.parametrize(
    ("command", "exit_code"),
    [("exit 3", 3), ("kill -TERM $$", 128 + 15), ("false", 1)],
)
async def test_exit_code_is_reported(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient, command: str, exit_code: int
) -> None:
    kernel = spec(command)
    await client.create_kernels(agent.rpc_addr, [kernel])
    terminated = await events.wait_kernel("kernel.terminated", kernel.kernel_id)
    assert isinstance(terminated, KernelTerminated)
    assert (terminated.exit_code, terminated.reason) == (exit_code, "exited")


async def test_interactive_kernel_idles_until_destroyed(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    kernel = spec(None, session_type="interactive")
    running = await run_kernel(client, agent.rpc_addr, events, kernel)
    assert isinstance(running, KernelRunning) and running.pid
    os.kill(running.pid, 0)  # alive
    assert agent.backend.running_kernels() == [kernel.kernel_id]

    # Creating it again starts no second process and re-announces the same one.
    await client.create_kernels(agent.rpc_addr, [kernel])
    await events.wait_for(lambda e: events.of_kernel(kernel.kernel_id) == ["kernel.running"] * 2)
    again = [e for e in events.seen if isinstance(e, KernelRunning) and e.kernel_id == kernel.kernel_id]
    assert {e.pid for e in again} == {running.pid}

    accepted = await client.destroy_kernels(agent.rpc_addr, [kernel.kernel_id])
    assert accepted.accepted == [kernel.kernel_id]
    terminated = await events.wait_kernel("kernel.terminated", kernel.kernel_id)
    assert isinstance(terminated, KernelTerminated)
    assert terminated.reason == "destroyed"
    assert terminated.exit_code == 128 + 15
    assert_gone(running.pid)
    assert agent.backend.running_kernels() == []


async def test_sigterm_ignoring_kernel_is_killed_after_grace(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    kernel = spec("trap '' TERM; echo ready; while :; do sleep 0.1; done")
    await client.create_kernels(agent.rpc_addr, [kernel])
    running = await events.wait_kernel("kernel.running", kernel.kernel_id)
    assert isinstance(running, KernelRunning) and running.pid
    await wait_for_output(client, agent, kernel.kernel_id, "ready")

    await client.destroy_kernels(agent.rpc_addr, [kernel.kernel_id])
    terminated = await events.wait_kernel("kernel.terminated", kernel.kernel_id)
    assert isinstance(terminated, KernelTerminated)
    assert (terminated.exit_code, terminated.reason) == (128 + 9, "destroyed")
    assert_gone(running.pid)


async def test_forced_destroy_kills_at_once(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    agent.backend.kill_grace = 3600.0  # a graceful stop could never finish within the test
    kernel = spec("trap '' TERM; echo ready; while :; do sleep 0.1; done")
    await client.create_kernels(agent.rpc_addr, [kernel])
    await wait_for_output(client, agent, kernel.kernel_id, "ready")
    await client.destroy_kernels(agent.rpc_addr, [kernel.kernel_id], forced=True)
    terminated = await events.wait_kernel("kernel.terminated", kernel.kernel_id)
    assert isinstance(terminated, KernelTerminated)
    assert (terminated.exit_code, terminated.reason) == (128 + 9, "destroyed")


async def test_destroy_kills_the_whole_process_group(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    kernel = spec("sleep 1000 & echo $! > child.pid; echo ready; wait")
    await client.create_kernels(agent.rpc_addr, [kernel])
    await wait_for_output(client, agent, kernel.kernel_id, "ready")
    child = int((agent.work_dir / kernel.kernel_id / "child.pid").read_text())
    await client.destroy_kernels(agent.rpc_addr, [kernel.kernel_id])
    await events.wait_kernel("kernel.terminated", kernel.kernel_id)
    async with asyncio.timeout(10):  # the child is reaped by init, not by us
        while True:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            await asyncio.sleep(0.05)


async def test_destroy_of_unknown_and_of_ended_kernels(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    ended = spec("exit 5")
    await client.create_kernels(agent.rpc_addr, [ended])
    await events.wait_kernel("kernel.terminated", ended.kernel_id)

    accepted = await client.destroy_kernels(agent.rpc_addr, ["never-created", ended.kernel_id])
    assert accepted.accepted == ["never-created", ended.kernel_id]
    unknown = await events.wait_kernel("kernel.terminated", "never-created")
    assert isinstance(unknown, KernelTerminated)
    assert (unknown.reason, unknown.exit_code) == ("unknown", None)
    again = await events.wait_for(
        lambda e: (
            isinstance(e, KernelTerminated) and e.kernel_id == ended.kernel_id and e.reason == "destroyed"
        )
    )
    assert isinstance(again, KernelTerminated)
    assert (again.exit_code, again.session_id) == (5, ended.session_id)


async def test_environ_and_image_environment_reach_the_process(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    kernel = spec(
        'echo "$GREETING|$IMG_VAR|$SOKOVAN_KERNEL_ID|$SOKOVAN_SESSION_ID|$PATH"; pwd',
        image="custom",
        environ={"GREETING": "hi there"},
    )
    await client.create_kernels(agent.rpc_addr, [kernel])
    terminated = await events.wait_kernel("kernel.terminated", kernel.kernel_id)
    assert isinstance(terminated, KernelTerminated) and terminated.exit_code == 0
    line, cwd = (await client.logs(agent.rpc_addr, kernel.kernel_id)).stdout.splitlines()
    assert line == f"hi there|from-image|{kernel.kernel_id}|{kernel.session_id}|/usr/bin:/bin"
    assert cwd == str(agent.work_dir / kernel.kernel_id)


async def test_python_image_runs_python3(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    kernel = spec("python3 -c 'print(6 * 7)'", image="python:3")
    await client.create_kernels(agent.rpc_addr, [kernel])
    terminated = await events.wait_kernel("kernel.terminated", kernel.kernel_id)
    assert isinstance(terminated, KernelTerminated) and terminated.exit_code == 0
    assert (await client.logs(agent.rpc_addr, kernel.kernel_id)).stdout == "42\n"


async def test_check_and_pull_prepares_known_images_and_fails_unknown_ones(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    known, unknown = spec("true", image="python:3"), spec("true", image="cuda:12")
    accepted = await client.check_and_pull(agent.rpc_addr, [known, unknown])
    assert accepted.accepted == [known.kernel_id, unknown.kernel_id]
    await events.wait_kernel("kernel.prepared", known.kernel_id)
    failed = await events.wait_kernel("kernel.image_pull_failed", unknown.kernel_id)
    assert isinstance(failed, KernelImagePullFailed)
    assert failed.message == f"image 'cuda:12' is not available on agent {agent.agent_id}"
    assert events.of_kernel(known.kernel_id) == ["kernel.pulling", "kernel.prepared"]
    assert events.of_kernel(unknown.kernel_id) == ["kernel.pulling", "kernel.image_pull_failed"]


async def test_create_with_unknown_image_fails(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    kernel = spec("true", image="nope")
    await client.create_kernels(agent.rpc_addr, [kernel])
    failed = await events.wait_kernel("kernel.creation_failed", kernel.kernel_id)
    assert isinstance(failed, KernelCreationFailed)
    assert "nope" in failed.message
    assert agent.backend.running_kernels() == []


async def test_logs_of_unknown_kernel_is_404(agent: AgentDaemon, client: AgentRPCClient) -> None:
    with pytest.raises(RPCError, match="HTTP 404"):
        await client.logs(agent.rpc_addr, "no-such-kernel")
    with pytest.raises(RPCError, match="HTTP 404"):
        await client.logs(agent.rpc_addr, "../../etc")


async def test_many_kernels(agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient) -> None:
    kernels = [spec(f"echo {i}") for i in range(40)]
    await client.create_kernels(agent.rpc_addr, kernels)
    for i, kernel in enumerate(kernels):
        terminated = await events.wait_kernel("kernel.terminated", kernel.kernel_id, within=30)
        assert isinstance(terminated, KernelTerminated) and terminated.exit_code == 0
        assert (await client.logs(agent.rpc_addr, kernel.kernel_id)).stdout == f"{i}\n"
