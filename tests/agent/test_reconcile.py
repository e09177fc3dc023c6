"""The `reconcile` RPC: each kernel's current state re-told as the one event that reports it."""

from __future__ import annotations

import os

import pytest
import redis.asyncio as aioredis

from sokovan.agent.daemon import AgentDaemon
from sokovan.agent.hollow import HollowFleet
from sokovan.common.events import (
    AgentEvent,
    KernelImagePullFailed,
    KernelPrepared,
    KernelRunning,
    KernelTerminated,
)
from sokovan.common.rpc import (
    AgentRPCClient,
    KernelSpec,
    ReconcileItem,
    ReconcileRequest,
    signed_headers,
)
from sokovan.common.settings import Settings
from tests.agent.conftest import AgentEvents, FleetFactory, post_rpc, run_kernel, signed, spec


def item(kernel: KernelSpec | None, phase: str, image: str = "") -> ReconcileItem:
    """An item for `kernel`, or for a kernel no agent has heard of."""
    if kernel is None:
        kernel = spec(None, image=image or "shell")
    return ReconcileItem(
        kernel_id=kernel.kernel_id, session_id=kernel.session_id, image=image or kernel.image, phase=phase
    )


def never_heard_of() -> dict[str, ReconcileItem]:
    """Items for kernels no agent has heard of, one for each phase the manager may believe them in."""
    return {
        "lost": item(None, "run"),
        "unknown": item(None, "terminate"),
        "prepared": item(None, "pull", image="python:3"),
        "pull_failed": item(None, "pull", image="cuda:12"),
    }


def assert_judged_by_phase(state: dict[str, AgentEvent], agent_id: str) -> None:
    """`never_heard_of()`'s kernels are reported by the phase the manager believes them in."""
    assert isinstance(state["lost"], KernelTerminated)
    assert (state["lost"].exit_code, state["lost"].reason) == (None, "lost")
    assert isinstance(state["unknown"], KernelTerminated)
    assert (state["unknown"].exit_code, state["unknown"].reason) == (None, "unknown")
    assert isinstance(state["prepared"], KernelPrepared)
    assert isinstance(state["pull_failed"], KernelImagePullFailed)
    assert state["pull_failed"].message == f"image 'cuda:12' is not available on agent {agent_id}"


async def reconcile_and_collect(
    client: AgentRPCClient,
    rpc_addr: str,
    events: AgentEvents,
    items: list[ReconcileItem],
    agent_id: str = "",
) -> dict[str, AgentEvent]:
    """Reconcile `items`; the one event published for each (and checks that there is just one).

    Every earlier event of these kernels must have been seen already. A check_and_pull of a
    sentinel kernel afterwards proves (one ordered outbox) that nothing else was published for them.
    """
    start = len(events.seen)
    accepted = await client.reconcile(rpc_addr, items, agent_id=agent_id)
    assert accepted.accepted == [i.kernel_id for i in items]
    sentinel = spec("true", image="python:3")
    await client.check_and_pull(rpc_addr, [sentinel], agent_id=agent_id)
    await events.wait_kernel("kernel.pulling", sentinel.kernel_id)
    wanted = {i.kernel_id for i in items}
    after = [e for e in events.seen[start:] if getattr(e, "kernel_id", None) in wanted]
    assert sorted(getattr(e, "kernel_id", "") for e in after) == sorted(wanted)
    by_kernel = {getattr(e, "kernel_id", ""): e for e in after}
    for i in items:
        event = by_kernel[i.kernel_id]
        assert getattr(event, "session_id", None) == i.session_id
        if agent_id:
            assert event.agent_id == agent_id
    return by_kernel


async def test_reconcile_reports_live_ended_and_unknown_kernels(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    live, ended = spec("sleep 30"), spec("exit 3")
    await client.create_kernels(agent.rpc_addr, [live, ended])
    running = await events.wait_kernel("kernel.running", live.kernel_id)
    assert isinstance(running, KernelRunning) and running.pid
    await events.wait_kernel("kernel.terminated", ended.kernel_id)
    await events.wait_kernel("kernel.running", ended.kernel_id)

    items = {"live": item(live, "run"), "ended": item(ended, "run"), **never_heard_of()}
    got = await reconcile_and_collect(client, agent.rpc_addr, events, list(items.values()))
    state = {case: got[i.kernel_id] for case, i in items.items()}

    assert isinstance(state["live"], KernelRunning) and state["live"].pid == running.pid
    assert isinstance(state["ended"], KernelTerminated)
    assert (state["ended"].exit_code, state["ended"].reason) == (3, "exited")
    assert_judged_by_phase(state, agent.agent_id)

    # Nothing was started or stopped.
    assert agent.backend.running_kernels() == [live.kernel_id]
    os.kill(running.pid, 0)
    for case in ("lost", "unknown", "prepared", "pull_failed"):
        assert not (agent.work_dir / items[case].kernel_id).exists()


async def test_reconcile_keeps_the_original_reason_of_an_ended_kernel(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    destroyed = spec(None, session_type="interactive")
    await run_kernel(client, agent.rpc_addr, events, destroyed)
    await client.destroy_kernels(agent.rpc_addr, [destroyed.kernel_id])
    await events.wait_kernel("kernel.terminated", destroyed.kernel_id)

    # Whatever the manager believes, an ended kernel is reported as it ended.
    for phase in ("run", "terminate", "pull"):
        got = await reconcile_and_collect(client, agent.rpc_addr, events, [item(destroyed, phase)])
        event = got[destroyed.kernel_id]
        assert isinstance(event, KernelTerminated)
        assert (event.exit_code, event.reason) == (128 + 15, "destroyed")


async def test_unsigned_reconcile_is_401_and_publishes_nothing(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    rejected = item(None, "run")
    body = ReconcileRequest(kernels=[rejected]).model_dump_json().encode()
    for headers in (
        {"Content-Type": "application/json"},
        signed_headers("not-the-secret", body, method="reconcile"),
    ):
        status, _ = await post_rpc(agent.rpc_addr, "reconcile", body, headers)
        assert status == 401
    await reconcile_and_collect(client, agent.rpc_addr, events, [])
    assert events.of_kernel(rejected.kernel_id) == []


@pytest.mark.parametrize("body", [b"{}", b'{"kernels": [{"kernel_id": "k1", "session_id": "s1"}]}'])
async def test_invalid_reconcile_is_400(agent: AgentDaemon, body: bytes) -> None:
    headers = signed(agent, body, method="reconcile")
    status, answer = await post_rpc(agent.rpc_addr, "reconcile", body, headers)
    assert status == 400
    assert answer["error"].startswith("invalid reconcile request")


async def test_hollow_fleet_reconciles_through_the_agent_named_in_the_header(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    # Every simulated pull fails: reconcile reports state and pulls nothing, so it is not applied.
    fleet: HollowFleet = await fleet_factory(2, pull_failure_rate=1.0)
    events = AgentEvents(redis, settings, None)
    live, exited, destroyed = spec("sleep 30"), spec("sleep 0"), spec(None, session_type="interactive")
    await client.create_kernels(fleet.rpc_addr, [live, exited, destroyed], agent_id="hollow-0001")
    await events.wait_kernel("kernel.terminated", exited.kernel_id)
    await events.wait_kernel("kernel.running", destroyed.kernel_id)
    await client.destroy_kernels(fleet.rpc_addr, [destroyed.kernel_id], agent_id="hollow-0001")
    await events.wait_kernel("kernel.terminated", destroyed.kernel_id)
    await events.wait_kernel("kernel.running", live.kernel_id)

    items = {
        "live": item(live, "run"),
        "exited": item(exited, "run"),
        "destroyed": item(destroyed, "terminate"),
        **never_heard_of(),
    }
    got = await reconcile_and_collect(
        client, fleet.rpc_addr, events, list(items.values()), agent_id="hollow-0001"
    )
    state = {case: got[i.kernel_id] for case, i in items.items()}
    assert isinstance(state["live"], KernelRunning)
    assert isinstance(state["exited"], KernelTerminated)
    assert (state["exited"].exit_code, state["exited"].reason) == (0, "exited")
    assert isinstance(state["destroyed"], KernelTerminated)
    assert (state["destroyed"].exit_code, state["destroyed"].reason) == (143, "destroyed")
    assert_judged_by_phase(state, "hollow-0001")
    assert fleet.agents["hollow-0001"].running_kernels() == [live.kernel_id]
    assert fleet.agents["hollow-0000"].running_kernels() == []

    # Another agent of the fleet does not know the kernel: lost there.
    got = await reconcile_and_collect(
        client, fleet.rpc_addr, events, [item(live, "run")], agent_id="hollow-0000"
    )
    other = got[live.kernel_id]
    assert isinstance(other, KernelTerminated) and other.reason == "lost"
    assert fleet.agents["hollow-0001"].running_kernels() == [live.kernel_id]


@pytest.mark.parametrize(
    ("case", "agent_id", "status"), [("unsigned", "hollow-0000", 401), ("no header", "", 404)]
)
async def test_hollow_reconcile_it_cannot_serve_publishes_nothing(
    fleet_factory: FleetFactory,
    redis: aioredis.Redis,
    settings: Settings,
    client: AgentRPCClient,
    case: str,
    agent_id: str,
    status: int,
) -> None:
    fleet = await fleet_factory(1)
    events = AgentEvents(redis, settings, None)
    rejected = item(None, "run")
    body = ReconcileRequest(kernels=[rejected]).model_dump_json().encode()
    secret = "" if case == "unsigned" else settings.cluster_secret or ""
    headers = (
        signed_headers(secret, body, method="reconcile", agent_id=agent_id)
        if secret
        else {"X-Sokovan-Agent": agent_id}
    )
    code, _ = await post_rpc(fleet.rpc_addr, "reconcile", body, headers)
    assert code == status
    await reconcile_and_collect(client, fleet.rpc_addr, events, [], agent_id="hollow-0000")
    assert events.of_kernel(rejected.kernel_id) == []
