"""The hollow fleet's destroy grace: a simulated kernel "traps TERM" and ends after its reaction
time (the fleet's `stop_delay`), or, when it ignores TERM (the fleet's `ignore_term`, or a
`trap '' TERM` in its command), is "killed" when its grace ends: after min(grace, reaction), never
later than the grace. No upper bound on timings: ends are told apart by their exit codes (143 by
TERM, 137 at the grace), and a kernel is shown running well within its grace."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from sokovan.agent.hollow import HollowConfig
from sokovan.agent.hollow_commands import EXIT_KILL, EXIT_TERM, ignores_term, stop_after
from sokovan.agent.hollow_state import HollowStateFile
from sokovan.common.events import KernelTerminated
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.settings import Settings
from tests.agent.conftest import AgentEvents, FleetFactory, spec

AGENT = "hollow-0000"


@pytest.mark.parametrize(
    ("command", "ignores"),
    [
        ("trap '' TERM; while :; do sleep 1; done", True),
        ('trap "" TERM; python3 train.py', True),
        ("trap '' INT TERM; sleep 100", True),
        ("trap '' SIGTERM", True),
        ("trap '' 15", True),
        ("trap 'echo got TERM; exit 0' TERM; sleep 100", False),
        ("trap - TERM", False),
        ("trap '' INT", False),
        ("sleep 3600", False),
        ("", False),
        (None, False),
    ],
)
def test_ignores_term(command: str | None, ignores: bool) -> None:
    assert ignores_term(command) is ignores


@pytest.mark.parametrize(
    ("grace", "reaction", "expected"),
    [
        (30.0, 0.0, (0.0, EXIT_TERM)),  # traps TERM and ends at once
        (30.0, 2.0, (2.0, EXIT_TERM)),
        (2.0, 2.0, (2.0, EXIT_TERM)),
        (2.0, 30.0, (2.0, EXIT_KILL)),  # too slow: killed at the grace
        (2.0, None, (2.0, EXIT_KILL)),  # ignores TERM
        (0.0, None, (0.0, EXIT_KILL)),
        (0.0, 0.0, (0.0, EXIT_TERM)),
    ],
)
def test_stop_after(grace: float, reaction: float | None, expected: tuple[float, int]) -> None:
    assert stop_after(grace, reaction) == expected


@pytest.mark.parametrize("delay", [-1.0, float("inf"), float("nan")])
def test_a_bad_stop_delay_is_refused(delay: float) -> None:
    with pytest.raises(ValueError, match="stop delay"):
        HollowConfig(count=1, stop_delay=delay)


async def destroyed(events: AgentEvents, kernel_id: str) -> KernelTerminated:
    event = await events.wait_kernel("kernel.terminated", kernel_id, within=30)
    assert isinstance(event, KernelTerminated) and event.reason == "destroyed"
    return event


async def test_a_kernel_that_traps_term_ends_at_once_whatever_its_grace(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(1)
    events = AgentEvents(redis, settings, AGENT)
    kernel = spec("sleep 3600")
    await client.create_kernels(fleet.rpc_addr, [kernel], agent_id=AGENT)
    await client.destroy_kernels(fleet.rpc_addr, [kernel.kernel_id], agent_id=AGENT, grace=3600)
    assert (await destroyed(events, kernel.kernel_id)).exit_code == EXIT_TERM
    assert fleet.running_kernels() == 0


async def test_a_kernel_that_ignores_term_is_killed_when_its_grace_ends(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(1, ignore_term=True)
    events = AgentEvents(redis, settings, AGENT)
    kernel = spec("sleep 3600")
    await client.create_kernels(fleet.rpc_addr, [kernel], agent_id=AGENT)
    grace = 2.0
    asked = time.monotonic()
    await client.destroy_kernels(fleet.rpc_addr, [kernel.kernel_id], agent_id=AGENT, grace=grace)
    await asyncio.sleep(0.3)
    assert fleet.agents[AGENT].running_kernels() == [kernel.kernel_id]
    # A repeated destroy within the grace neither shortens nor restarts it.
    await client.destroy_kernels(fleet.rpc_addr, [kernel.kernel_id], agent_id=AGENT, grace=0)
    await client.destroy_kernels(fleet.rpc_addr, [kernel.kernel_id], agent_id=AGENT, grace=3600)
    assert fleet.agents[AGENT].running_kernels() == [kernel.kernel_id]

    assert (await destroyed(events, kernel.kernel_id)).exit_code == EXIT_KILL
    assert time.monotonic() - asked >= grace
    assert events.of_kernel(kernel.kernel_id) == ["kernel.running", "kernel.terminated"]


async def test_a_command_that_ignores_term_is_killed_when_its_grace_ends(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(1)
    events = AgentEvents(redis, settings, AGENT)
    stubborn, plain = spec("trap '' TERM; while :; do sleep 1; done"), spec("python3 train.py")
    await client.create_kernels(fleet.rpc_addr, [stubborn, plain], agent_id=AGENT)
    grace = 1.0
    asked = time.monotonic()
    ids = [stubborn.kernel_id, plain.kernel_id]
    await client.destroy_kernels(fleet.rpc_addr, ids, agent_id=AGENT, grace=grace)
    assert (await destroyed(events, plain.kernel_id)).exit_code == EXIT_TERM
    assert (await destroyed(events, stubborn.kernel_id)).exit_code == EXIT_KILL
    assert time.monotonic() - asked >= grace


async def test_a_slow_kernel_ends_after_its_reaction_or_at_its_grace(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(1, stop_delay=1.0)
    events = AgentEvents(redis, settings, AGENT)
    quick, cut = spec("sleep 3600"), spec("sleep 3600")
    await client.create_kernels(fleet.rpc_addr, [quick, cut], agent_id=AGENT)
    asked = time.monotonic()
    await client.destroy_kernels(fleet.rpc_addr, [quick.kernel_id], agent_id=AGENT, grace=3600)
    await client.destroy_kernels(fleet.rpc_addr, [cut.kernel_id], agent_id=AGENT, grace=0.2)
    assert (await destroyed(events, cut.kernel_id)).exit_code == EXIT_KILL  # cut short by its grace
    assert (await destroyed(events, quick.kernel_id)).exit_code == EXIT_TERM  # its reaction time
    assert time.monotonic() - asked >= 1.0


async def test_forced_ends_a_kernel_within_its_grace_and_a_timer_may_end_it_first(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(1, ignore_term=True)
    events = AgentEvents(redis, settings, AGENT)
    forced, short = spec("sleep 3600"), spec("sleep 0.5")
    await client.create_kernels(fleet.rpc_addr, [forced, short], agent_id=AGENT)
    ids = [forced.kernel_id, short.kernel_id]
    await client.destroy_kernels(fleet.rpc_addr, ids, agent_id=AGENT, grace=3600)
    await client.destroy_kernels(fleet.rpc_addr, [forced.kernel_id], agent_id=AGENT, forced=True)
    assert (await destroyed(events, forced.kernel_id)).exit_code == EXIT_KILL
    assert (await destroyed(events, short.kernel_id)).exit_code == 0  # its sleep ended first
    assert fleet.running_kernels() == 0


async def test_without_a_grace_a_stubborn_kernel_gets_the_default(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    """A destroy with no grace (an old manager's, a user's terminate) still ends a kernel that
    ignores TERM: after the agent's default kill grace; one that traps it at once, as before."""
    fleet = await fleet_factory(1)
    events = AgentEvents(redis, settings, AGENT)
    stubborn, plain = spec("trap '' TERM; while :; do sleep 1; done"), spec(None)
    await client.create_kernels(fleet.rpc_addr, [stubborn, plain], agent_id=AGENT)
    await client.destroy_kernels(fleet.rpc_addr, [stubborn.kernel_id, plain.kernel_id], agent_id=AGENT)
    assert (await destroyed(events, plain.kernel_id)).exit_code == EXIT_TERM
    assert (await destroyed(events, stubborn.kernel_id)).exit_code == EXIT_KILL


async def test_a_restarted_fleet_keeps_a_kernels_grace(
    fleet_factory: FleetFactory,
    redis: aioredis.Redis,
    settings: Settings,
    client: AgentRPCClient,
    tmp_path: Path,
) -> None:
    """A fleet stopped (detached) while kernels are within their grace: the next start ends each
    when its grace ends, or at once when it ended while the fleet was down; never as if undestroyed."""
    path = tmp_path / "fleet-state.json"
    first = await fleet_factory(1, state_file=path, ignore_term=True)
    events = AgentEvents(redis, settings, AGENT)
    lapsed, later, stubborn = spec("sleep 3600"), spec("sleep 3600"), spec("trap '' TERM; sleep 3600")
    await client.create_kernels(first.rpc_addr, [lapsed, later, stubborn], agent_id=AGENT)
    await client.destroy_kernels(first.rpc_addr, [lapsed.kernel_id], agent_id=AGENT, grace=0.2)
    await client.destroy_kernels(first.rpc_addr, [later.kernel_id], agent_id=AGENT, grace=3600)
    await first.stop(detach=True)
    assert not any(e.name == "kernel.terminated" for e in events.seen)
    kept = {k.kernel_id: k for k in HollowStateFile(path).load()[AGENT]}
    assert kept[lapsed.kernel_id].stops_at is not None
    assert kept[lapsed.kernel_id].stop_exit == EXIT_KILL
    assert kept[stubborn.kernel_id].stops_at is None and kept[stubborn.kernel_id].ignores_term
    await asyncio.sleep(0.3)  # `lapsed`'s grace ends while no fleet runs

    second = await fleet_factory(1, state_file=path)  # this fleet's kernels trap TERM
    assert (await destroyed(events, lapsed.kernel_id)).exit_code == EXIT_KILL
    assert second.agents[AGENT].running_kernels() == sorted([later.kernel_id, stubborn.kernel_id])
    await client.destroy_kernels(second.rpc_addr, [later.kernel_id], agent_id=AGENT, grace=0)  # kept
    await client.destroy_kernels(second.rpc_addr, [stubborn.kernel_id], agent_id=AGENT, grace=0.5)
    assert (await destroyed(events, stubborn.kernel_id)).exit_code == EXIT_KILL  # still ignores TERM
    assert second.agents[AGENT].running_kernels() == [later.kernel_id]
    await client.destroy_kernels(second.rpc_addr, [later.kernel_id], agent_id=AGENT, forced=True)
    assert (await destroyed(events, later.kernel_id)).exit_code == EXIT_KILL
