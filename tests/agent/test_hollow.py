"""The hollow fleet in-process: registration, RPC routed by agent id, timer kernels, pulls, stop."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from sokovan.agent.hollow import hollow_ids
from sokovan.agent.hollow_agent import HollowAgent, HollowBehaviour
from sokovan.agent.hollow_commands import sleep_seconds
from sokovan.agent.images import ImageCatalog
from sokovan.common.events import (
    AgentHeartbeat,
    KernelCreationFailed,
    KernelImagePullFailed,
    KernelRunning,
    KernelTerminated,
)
from sokovan.common.rpc import (
    AgentRPCClient,
    CheckAndPullRequest,
    CreateKernelsRequest,
    RPCError,
    signed_headers,
)
from sokovan.common.settings import Settings
from sokovan.common.slots import ResourceSlots
from tests.agent.conftest import AgentEvents, Empty, FleetFactory, post_rpc, spec


@pytest.mark.parametrize(
    ("command", "seconds"),
    [
        ("sleep 5", 5.0),
        ("  sleep 0.2  ", 0.2),
        ("exec sleep 3", 3.0),
        ("sleep .5", 0.5),
        ("sleep 10.", 10.0),
        ("sleep", None),
        ("sleep inf", None),
        ("sleep 5; echo hi", None),
        ("python3 -c 'import time; time.sleep(1)'", None),
        ("", None),
        (None, None),
    ],
)
def test_sleep_seconds(command: str | None, seconds: float | None) -> None:
    assert sleep_seconds(command) == seconds


def test_hollow_ids() -> None:
    assert hollow_ids("hollow", 3) == ["hollow-0000", "hollow-0001", "hollow-0002"]
    assert hollow_ids("hollow", 10_000)[-1] == "hollow-9999"
    wide = hollow_ids("h", 10_001)
    assert (wide[0], wide[-1]) == ("h-00000", "h-10000")


async def raw_call(fleet_addr: str, secret: str, method: str, body: BaseModel, agent_id: str) -> Any:
    data = body.model_dump_json().encode()
    headers = signed_headers(secret, data, method=method, agent_id=agent_id) if secret else {}
    return await post_rpc(fleet_addr, method, data, headers)


async def test_fleet_registers_every_agent_with_the_shared_rpc_addr(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings
) -> None:
    fleet = await fleet_factory(5, slots=ResourceSlots.parse_cli("cpu=2,mem=1g"), scaling_group="sim")
    events = AgentEvents(redis, settings, None)
    ids = [f"hollow-000{i}" for i in range(5)]
    await events.wait_for(
        lambda _: {e.agent_id for e in events.seen if e.name == "agent.heartbeat"} >= set(ids)
    )
    first = {e.agent_id: e for e in events.seen if isinstance(e, AgentHeartbeat) and e.seq == 1}
    assert sorted(first) == ids
    assert {beat.rpc_addr for beat in first.values()} == {fleet.rpc_addr}
    assert len({beat.boot_id for beat in first.values()}) == 5
    for beat in first.values():
        assert beat.scaling_group == "sim"
        assert beat.available_slots == {"cpu": "2", "mem": str(2**30)}
        assert beat.images == ["python:3", "shell"]
        assert beat.running_kernels == []

    # Then every agent beats on its own, with its own sequence.
    await events.wait_for(
        lambda _: (
            {e.agent_id for e in events.seen if isinstance(e, AgentHeartbeat) and e.seq == 2} >= set(ids)
        )
    )
    for agent_id in ids:
        seqs = [e.seq for e in events.seen if isinstance(e, AgentHeartbeat) and e.agent_id == agent_id]
        assert seqs == list(range(1, len(seqs) + 1))


async def test_rpc_reaches_the_agent_named_in_the_header(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(5)
    events = AgentEvents(redis, settings, None)
    assert await client.call(fleet.rpc_addr, "ping", Empty(), "hollow-0003") == {"agent_id": "hollow-0003"}

    kernel = spec("sleep 30")
    await client.check_and_pull(fleet.rpc_addr, [kernel], agent_id="hollow-0003")
    await client.create_kernels(fleet.rpc_addr, [kernel], agent_id="hollow-0003")
    await events.wait_kernel("kernel.running", kernel.kernel_id)
    assert events.of_kernel(kernel.kernel_id) == ["kernel.pulling", "kernel.prepared", "kernel.running"]
    assert {e.agent_id for e in events.seen if getattr(e, "kernel_id", None) == kernel.kernel_id} == {
        "hollow-0003"
    }
    assert fleet.agents["hollow-0003"].running_kernels() == [kernel.kernel_id]
    assert all(not a.running_kernels() for i, a in fleet.agents.items() if i != "hollow-0003")

    logs = await client.logs(fleet.rpc_addr, kernel.kernel_id, agent_id="hollow-0003")
    assert logs.stdout == f"simulated kernel {kernel.kernel_id}\n"
    with pytest.raises(RPCError, match="HTTP 404"):  # another agent does not know it
        await client.logs(fleet.rpc_addr, kernel.kernel_id, agent_id="hollow-0002")
    with pytest.raises(RPCError, match="HTTP 404"):
        await client.logs(fleet.rpc_addr, "no-such-kernel", agent_id="hollow-0003")

    # The heartbeat of that agent lists the kernel.
    beat = await events.wait_for(
        lambda e: isinstance(e, AgentHeartbeat) and kernel.kernel_id in e.running_kernels
    )
    assert beat.agent_id == "hollow-0003"


@pytest.mark.parametrize(
    ("case", "agent_id", "status"),
    [("unknown agent", "hollow-0099", 404), ("no header", "", 404), ("unsigned", "hollow-0001", 401)],
)
async def test_requests_the_fleet_cannot_serve_start_nothing(
    fleet_factory: FleetFactory,
    redis: aioredis.Redis,
    settings: Settings,
    client: AgentRPCClient,
    case: str,
    agent_id: str,
    status: int,
) -> None:
    fleet = await fleet_factory(2)
    secret = "" if case == "unsigned" else settings.cluster_secret or ""
    rejected = spec("sleep 30")
    code, body = await raw_call(
        fleet.rpc_addr, secret, "create_kernels", CreateKernelsRequest(kernels=[rejected]), agent_id
    )
    assert code == status
    assert "error" in body
    if status == 404:
        assert body["error"].startswith("unknown agent")
    assert fleet.running_kernels() == 0

    # A signature made for one agent does not hold when the header names another.
    data = CreateKernelsRequest(kernels=[rejected]).model_dump_json().encode()
    headers = signed_headers(
        settings.cluster_secret or "", data, method="create_kernels", agent_id="hollow-0000"
    )
    headers["X-Sokovan-Agent"] = "hollow-0001"
    code, _ = await post_rpc(fleet.rpc_addr, "create_kernels", data, headers)
    assert code == 401

    events = AgentEvents(redis, settings, None)
    accepted = spec("true")
    await client.check_and_pull(fleet.rpc_addr, [accepted], agent_id="hollow-0001")
    await events.wait_kernel("kernel.prepared", accepted.kernel_id)
    assert events.of_kernel(rejected.kernel_id) == []


async def test_sleep_kernel_exits_zero_after_its_time(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(2)
    events = AgentEvents(redis, settings, "hollow-0001")
    kernels = [spec("sleep 0.2"), spec(" exec sleep 0.3 "), spec("sleep 0")]
    started = time.monotonic()
    await client.create_kernels(fleet.rpc_addr, kernels, agent_id="hollow-0001")
    for kernel in kernels:
        running = await events.wait_kernel("kernel.running", kernel.kernel_id)
        assert isinstance(running, KernelRunning) and running.session_id == kernel.session_id
        terminated = await events.wait_kernel("kernel.terminated", kernel.kernel_id, within=5)
        assert isinstance(terminated, KernelTerminated)
        assert (terminated.exit_code, terminated.reason) == (0, "exited")
        assert events.of_kernel(kernel.kernel_id) == ["kernel.running", "kernel.terminated"]
    assert time.monotonic() - started >= 0.3
    assert fleet.running_kernels() == 0
    # An ended kernel's logs are still there; destroying it again repeats its end.
    assert (await client.logs(fleet.rpc_addr, kernels[0].kernel_id, agent_id="hollow-0001")).stdout
    await client.destroy_kernels(fleet.rpc_addr, [kernels[0].kernel_id], agent_id="hollow-0001")
    again = await events.wait_for(
        lambda e: (
            isinstance(e, KernelTerminated)
            and e.kernel_id == kernels[0].kernel_id
            and e.reason == "destroyed"
        )
    )
    assert isinstance(again, KernelTerminated) and again.exit_code == 0


async def test_other_kernels_run_until_destroyed(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(1)
    events = AgentEvents(redis, settings, "hollow-0000")
    idle, busy, forced = spec(None, session_type="interactive"), spec("python3 train.py"), spec("sleep 60")
    await client.create_kernels(fleet.rpc_addr, [idle, busy, forced], agent_id="hollow-0000")
    await client.create_kernels(fleet.rpc_addr, [idle], agent_id="hollow-0000")  # repeated: reported again
    await events.wait_for(lambda _: events.of_kernel(idle.kernel_id) == ["kernel.running"] * 2)
    await asyncio.sleep(0.5)
    assert fleet.agents["hollow-0000"].running_kernels() == sorted(k.kernel_id for k in (idle, busy, forced))

    await client.destroy_kernels(fleet.rpc_addr, [idle.kernel_id, busy.kernel_id], agent_id="hollow-0000")
    await client.destroy_kernels(fleet.rpc_addr, [forced.kernel_id], forced=True, agent_id="hollow-0000")
    await client.destroy_kernels(fleet.rpc_addr, ["never-created"], agent_id="hollow-0000")
    for kernel, exit_code in ((idle, 143), (busy, 143), (forced, 137)):
        terminated = await events.wait_kernel("kernel.terminated", kernel.kernel_id)
        assert isinstance(terminated, KernelTerminated)
        assert (terminated.exit_code, terminated.reason) == (exit_code, "destroyed")
    unknown = await events.wait_kernel("kernel.terminated", "never-created")
    assert isinstance(unknown, KernelTerminated)
    assert (unknown.reason, unknown.exit_code, unknown.session_id) == ("unknown", None, "")
    assert fleet.running_kernels() == 0


async def test_pulls_prepare_fail_and_wait(
    fleet_factory: FleetFactory,
    redis: aioredis.Redis,
    settings: Settings,
    client: AgentRPCClient,
    tmp_path: Path,
) -> None:
    (tmp_path / "images.toml").write_text('[images."cuda:12"]\npath = []\n')
    catalog = ImageCatalog.from_file(tmp_path / "images.toml")
    failing = await fleet_factory(1, prefix="failing", pull_failure_rate=1.0)
    slow = await fleet_factory(1, prefix="slow", pull_delay=0.4, catalog=catalog)
    events = AgentEvents(redis, settings, None)

    doomed = spec("true", image="python:3")
    await client.check_and_pull(failing.rpc_addr, [doomed], agent_id="failing-0000")
    failed = await events.wait_kernel("kernel.image_pull_failed", doomed.kernel_id)
    assert isinstance(failed, KernelImagePullFailed) and "simulated" in failed.message
    assert events.of_kernel(doomed.kernel_id) == ["kernel.pulling", "kernel.image_pull_failed"]

    known, unknown = spec("true", image="cuda:12"), spec("true", image="rocm:6")
    started = time.monotonic()
    await client.check_and_pull(slow.rpc_addr, [known, unknown], agent_id="slow-0000")
    missing = await events.wait_kernel("kernel.image_pull_failed", unknown.kernel_id)
    assert isinstance(missing, KernelImagePullFailed)
    assert missing.message == "image 'rocm:6' is not available on agent slow-0000"
    await events.wait_kernel("kernel.prepared", known.kernel_id)
    assert time.monotonic() - started >= 0.4
    assert events.of_kernel(known.kernel_id) == ["kernel.pulling", "kernel.prepared"]

    await client.create_kernels(slow.rpc_addr, [unknown], agent_id="slow-0000")
    refused = await events.wait_kernel("kernel.creation_failed", unknown.kernel_id)
    assert isinstance(refused, KernelCreationFailed) and "rocm:6" in refused.message
    beat = await events.wait_for(lambda e: isinstance(e, AgentHeartbeat) and e.agent_id == "slow-0000")
    assert isinstance(beat, AgentHeartbeat) and beat.images == ["cuda:12", "python:3", "shell"]


async def test_stop_announces_every_agent_and_ends_every_kernel(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(3)
    events = AgentEvents(redis, settings, None)
    kernels = {agent_id: spec("sleep 600") for agent_id in fleet.agents}
    for agent_id, kernel in kernels.items():
        await client.create_kernels(fleet.rpc_addr, [kernel], agent_id=agent_id)
    for kernel in kernels.values():
        await events.wait_kernel("kernel.running", kernel.kernel_id)
    await fleet.stop()
    for agent_id, kernel in kernels.items():
        terminated = await events.wait_kernel("kernel.terminated", kernel.kernel_id)
        assert isinstance(terminated, KernelTerminated)
        assert (terminated.agent_id, terminated.reason, terminated.exit_code) == (agent_id, "destroyed", 143)
    names = [(e.name, e.agent_id) for e in events.seen]
    for agent_id in kernels:
        stopping = names.index(("agent.stopping", agent_id))
        assert stopping < names.index(("kernel.terminated", agent_id))
        assert ("agent.heartbeat", agent_id) not in names[stopping:]
    with pytest.raises(RPCError):
        await client.call(fleet.rpc_addr, "ping", Empty(), "hollow-0000")


async def test_pull_failures_are_reproducible_with_a_seed() -> None:
    async def outcomes(seed: int) -> list[str]:
        emitted: list[BaseModel] = []
        behaviour = HollowBehaviour(
            scaling_group="default",
            available_slots={},
            catalog=ImageCatalog(),
            pull_delay=0.0,
            pull_failure_rate=0.5,
            rng=random.Random(seed),
        )
        agent = HollowAgent("hollow-0000", "boot", behaviour, emitted.append)
        kernels = [spec("true", kernel_id=f"k{i}") for i in range(40)]
        await agent.check_and_pull(CheckAndPullRequest(kernels=kernels))
        return [getattr(e, "name", "") for e in emitted if getattr(e, "name", "") != "kernel.pulling"]

    first, again, other = await outcomes(7), await outcomes(7), await outcomes(8)
    assert len(first) == 40 and set(first) == {"kernel.prepared", "kernel.image_pull_failed"}
    assert first == again
    assert first != other
