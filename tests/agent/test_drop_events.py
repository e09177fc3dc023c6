"""Fault injection for tests: `--drop-events` loses the first event of each named kind, once."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import structlog
from pydantic import BaseModel

from sokovan.agent.outbox import EVENT_NAMES, EventDropper, parse_event_names
from sokovan.common.events import AgentEvent, KernelRunning, KernelTerminated
from sokovan.common.rpc import AgentRPCClient, KernelSpec, ReconcileItem
from sokovan.common.settings import Settings
from tests.agent.agent_procs import stop_agent
from tests.agent.conftest import AgentEvents, FleetFactory, spec
from tests.agent.test_cli import SOKOVAN, run_cli, run_cli_with_config


def run_item(kernel: KernelSpec) -> ReconcileItem:
    return ReconcileItem(kernel_id=kernel.kernel_id, session_id=kernel.session_id, phase="run")


async def flush(client: AgentRPCClient, rpc_addr: str, events: AgentEvents, agent_id: str = "") -> None:
    """Every event emitted before this call is on the stream and seen (one ordered outbox)."""
    sentinel = spec("true", image="python:3")
    await client.check_and_pull(rpc_addr, [sentinel], agent_id=agent_id)
    await events.wait_kernel("kernel.pulling", sentinel.kernel_id)


def test_event_names() -> None:
    assert {"kernel.running", "kernel.prepared", "kernel.terminated", "kernel.pulling"} <= EVENT_NAMES
    assert {"kernel.image_pull_failed", "kernel.creation_failed", "agent.heartbeat"} <= EVENT_NAMES
    assert parse_event_names(None) == frozenset()
    assert parse_event_names("") == frozenset()
    assert parse_event_names(" kernel.running, kernel.prepared ,") == {"kernel.running", "kernel.prepared"}
    assert parse_event_names(["kernel.terminated"]) == {"kernel.terminated"}
    with pytest.raises(ValueError, match=r"kernel\.runing"):
        parse_event_names("kernel.runing")
    with pytest.raises(ValueError, match="expected event names"):
        parse_event_names([1])  # type: ignore[list-item]


def test_dropper_drops_only_the_first_event_of_each_named_kind() -> None:
    emitted: list[BaseModel] = []
    dropper = EventDropper(["kernel.running", "kernel.terminated"])
    emit = dropper.wrap(emitted.append)
    ids = {"agent_id": "a", "session_id": "s"}
    with structlog.testing.capture_logs() as logs:
        for kernel_id in ("k1", "k2"):
            emit(KernelRunning(**ids, kernel_id=kernel_id))
            emit(KernelTerminated(**ids, kernel_id=kernel_id))
    assert [(getattr(e, "name", ""), getattr(e, "kernel_id", "")) for e in emitted] == [
        ("kernel.running", "k2"),
        ("kernel.terminated", "k2"),
    ]
    assert dropper.pending == frozenset()
    dropped = [entry for entry in logs if entry["event"] == "event.dropped_for_test"]
    assert [(d["event_name"], d["kernel_id"], d["log_level"]) for d in dropped] == [
        ("kernel.running", "k1", "warning"),
        ("kernel.terminated", "k1", "warning"),
    ]


@pytest.mark.parametrize(
    ("args", "config"),
    [(["--drop-events", "kernel.runing"], None), ([], 'drop_events = ["kernel.running", "nope"]')],
)
def test_unknown_event_names_are_refused(
    service_env: dict[str, str], tmp_path: Path, args: list[str], config: str | None
) -> None:
    result = run_cli_with_config(args, config, tmp_path, service_env)
    assert result.returncode != 0
    assert "bad --drop-events" in result.stderr
    assert "Traceback" not in result.stderr


def test_option_is_hidden(service_env: dict[str, str]) -> None:
    result = run_cli(["--help"], service_env)
    assert result.returncode == 0
    assert "--drop-events" not in result.stdout


async def run_agent(args: list[str], env: dict[str, str], log: Path) -> asyncio.subprocess.Process:
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        return await asyncio.create_subprocess_exec(
            SOKOVAN, "agent", "--rpc-port", "0", *args, env=env, stdout=out, stderr=asyncio.subprocess.STDOUT
        )
    finally:
        os.close(out)


async def test_real_agent_drops_the_first_kernel_running_and_reconcile_retells_it(
    service_env: dict[str, str], settings: Settings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    agent_id = f"drop-{uuid.uuid4().hex[:8]}"
    args = ["--id", agent_id, "--work-dir", str(tmp_path / "work"), "--heartbeat-interval", "0.5"]
    proc = await run_agent([*args, "--drop-events", "kernel.running"], service_env, tmp_path / "agent.log")
    events = AgentEvents(redis, settings, agent_id)
    client = AgentRPCClient(settings.cluster_secret or "")
    try:
        beat = await events.wait_for(lambda e: e.name == "agent.heartbeat")
        rpc_addr = getattr(beat, "rpc_addr", "")
        first, second = spec(None, session_type="interactive"), spec(None, session_type="interactive")
        await client.create_kernels(rpc_addr, [first])
        await client.create_kernels(rpc_addr, [second])
        running = await events.wait_kernel("kernel.running", second.kernel_id)
        assert isinstance(running, KernelRunning) and running.pid
        await flush(client, rpc_addr, events)
        assert events.of_kernel(first.kernel_id) == []  # dropped: the kernel runs, nobody was told

        await client.reconcile(rpc_addr, [run_item(first)])
        retold = await events.wait_kernel("kernel.running", first.kernel_id)
        assert isinstance(retold, KernelRunning) and retold.pid and retold.pid != running.pid
        assert retold.session_id == first.session_id
        os.kill(retold.pid, 0)

        # Only the first one: a repeated create is reported again.
        await client.create_kernels(rpc_addr, [first])
        await events.wait_for(lambda _: events.of_kernel(first.kernel_id) == ["kernel.running"] * 2)
    finally:
        await client.close()
        await stop_agent(proc)
    assert proc.returncode == 0
    for kernel in (first, second):  # the other kinds are untouched
        terminated = await events.wait_kernel("kernel.terminated", kernel.kernel_id)
        assert isinstance(terminated, KernelTerminated) and terminated.reason == "destroyed"
    log = (tmp_path / "agent.log").read_text()
    assert log.count("event.dropped_for_test") == 1
    assert first.kernel_id in log


async def test_hollow_fleet_drops_the_first_event_of_the_whole_fleet(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(2, drop_events=frozenset({"kernel.running", "kernel.terminated"}))
    events = AgentEvents(redis, settings, None)
    first, second, third = (spec(None, session_type="interactive") for _ in range(3))
    with structlog.testing.capture_logs() as logs:
        await client.create_kernels(fleet.rpc_addr, [first], agent_id="hollow-0000")
        await client.create_kernels(fleet.rpc_addr, [second], agent_id="hollow-0001")
        await client.create_kernels(fleet.rpc_addr, [third], agent_id="hollow-0000")
        for kernel in (second, third):
            await events.wait_kernel("kernel.running", kernel.kernel_id)
        await flush(client, fleet.rpc_addr, events, agent_id="hollow-0000")
        assert events.of_kernel(first.kernel_id) == []
        assert fleet.agents["hollow-0000"].running_kernels() == sorted([first.kernel_id, third.kernel_id])

        await client.reconcile(fleet.rpc_addr, [run_item(first)], agent_id="hollow-0000")
        retold = await events.wait_kernel("kernel.running", first.kernel_id)
        assert (retold.agent_id, getattr(retold, "session_id", "")) == ("hollow-0000", first.session_id)

        # The first KernelTerminated (of another agent) is dropped too, the next one is not.
        await client.destroy_kernels(fleet.rpc_addr, [second.kernel_id], agent_id="hollow-0001")
        await client.destroy_kernels(fleet.rpc_addr, [first.kernel_id], agent_id="hollow-0000")
        terminated = await events.wait_kernel("kernel.terminated", first.kernel_id)
        assert isinstance(terminated, KernelTerminated) and terminated.reason == "destroyed"
        await flush(client, fleet.rpc_addr, events, agent_id="hollow-0001")
        assert events.of_kernel(second.kernel_id) == ["kernel.running"]
        assert fleet.agents["hollow-0001"].running_kernels() == []

        # Reconcile re-tells how it ended.
        await client.reconcile(fleet.rpc_addr, [run_item(second)], agent_id="hollow-0001")
        ended: AgentEvent = await events.wait_kernel("kernel.terminated", second.kernel_id)
        assert isinstance(ended, KernelTerminated)
        assert (ended.exit_code, ended.reason) == (143, "destroyed")
    dropped = [entry for entry in logs if entry["event"] == "event.dropped_for_test"]
    assert [(d["event_name"], d["agent_id"], d["kernel_id"]) for d in dropped] == [
        ("kernel.running", "hollow-0000", first.kernel_id),
        ("kernel.terminated", "hollow-0001", second.kernel_id),
    ]


async def test_simulated_fleet_takes_drop_events_from_the_config_file(
    service_env: dict[str, str], settings: Settings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    prefix = f"dropsim{uuid.uuid4().hex[:6]}"
    (tmp_path / "agent.toml").write_text('[agent]\ndrop_events = "kernel.prepared"\n')
    args = ["--simulate", "2", "--id", prefix, "--heartbeat-interval", "0.5"]
    proc = await run_agent([*args, "--config", str(tmp_path / "agent.toml")], service_env, tmp_path / "a.log")
    events = AgentEvents(redis, settings, None)
    client = AgentRPCClient(settings.cluster_secret or "")
    try:
        beat = await events.wait_for(lambda e: e.name == "agent.heartbeat" and e.agent_id.startswith(prefix))
        rpc_addr = getattr(beat, "rpc_addr", "")
        first, second = spec("true", image="python:3"), spec("true", image="python:3")
        await client.check_and_pull(rpc_addr, [first], agent_id=f"{prefix}-0000")
        await client.check_and_pull(rpc_addr, [second], agent_id=f"{prefix}-0001")
        await events.wait_kernel("kernel.prepared", second.kernel_id)
        assert events.of_kernel(first.kernel_id) == ["kernel.pulling"]
        item = ReconcileItem(
            kernel_id=first.kernel_id, session_id=first.session_id, image="python:3", phase="pull"
        )
        await client.reconcile(rpc_addr, [item], agent_id=f"{prefix}-0000")
        await events.wait_kernel("kernel.prepared", first.kernel_id)
    finally:
        await client.close()
        await stop_agent(proc)
    assert proc.returncode == 0
    assert (tmp_path / "a.log").read_text().count("event.dropped_for_test") == 1
