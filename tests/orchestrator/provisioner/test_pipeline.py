"""The whole pipeline over in-memory snapshots: tables of input → plan."""

from __future__ import annotations

import asyncio

import pytest

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus
from sokovan.orchestrator.provisioner.build import provisioner_for
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, KeypairPolicy, Quota, Tenancy
from sokovan.state.session_reads import YIELD_EVERY
from tests.orchestrator.factories import agent, session, snapshot


def test_two_cpu3_sessions_on_a_cpu4_agent_one_placed_one_waits() -> None:
    snap = snapshot(agent("a", cpu=4))
    first, second = session(cpu=3, created=0), session(cpu=3, created=1)
    plan = provisioner_for(snap).plan([first, second], snap)
    assert [p.session_id for p in plan.placements] == [first.id]
    assert plan.waiting[second.id] == "0/1 agents fit: 1 insufficient cpu"


@pytest.mark.parametrize(
    ("agents", "reason"),
    [
        ([agent("a", cpu=1), agent("b", cpu=1)], "0/2 agents fit: 2 insufficient cpu"),
        (
            [agent("a", cpu=1), agent("b", status=AgentStatus.DOWN)],
            "0/2 agents fit: 1 insufficient cpu, 1 not READY (DOWN)",
        ),
        (
            [agent("a", status=AgentStatus.DRAINING), agent("b", status=AgentStatus.DEGRADED)],
            "0/2 agents fit: 1 not READY (DEGRADED), 1 not READY (DRAINING)",
        ),
        ([agent("a", images=("shell",))], "0/1 agents fit: 1 image not offered"),
        ([agent("a", max_kernels=0)], "0/1 agents fit: 1 at kernel limit"),
        ([], "0/0 agents fit"),
    ],
)
def test_pending_reason_counts_every_agent(agents: list[AgentSnapshot], reason: str) -> None:
    s = session(cpu=2)
    snap = snapshot(*agents)
    plan = provisioner_for(snap).plan([s], snap)
    assert plan.placements == []
    assert plan.waiting[s.id] == reason


def test_single_node_cluster_lands_on_one_agent() -> None:
    snap = snapshot(agent("a", cpu=2), agent("b", cpu=4))
    s = session(cpu=2, size=2)
    (placement,) = provisioner_for(snap).plan([s], snap).placements
    assert set(placement.kernels.values()) == {"b"}


def test_multi_node_cluster_spreads_all_or_nothing() -> None:
    s = session(cpu=1, size=3, mode="multi-node")
    two = snapshot(agent("a"), agent("b"))
    plan = provisioner_for(two).plan([s], two)
    assert plan.placements == []
    assert plan.waiting[s.id].startswith("multi-node needs 3 agents")
    three = snapshot(agent("a"), agent("b"), agent("c"), agent_selection="concentrated")
    (placement,) = provisioner_for(three).plan([s], three).placements
    assert sorted(placement.kernels.values()) == ["a", "b", "c"]


def test_every_violated_limit_is_reported_together() -> None:
    quota = Quota("keypair policy 'p'", ResourceSlots.parse({"cpu": 0}))
    t = Tenancy(keypairs={"AK1": KeypairPolicy(quota=quota, max_concurrent_sessions=0)})
    s = session()
    snap = snapshot(agent("a"), tenancy=t)
    reason = provisioner_for(snap).plan([s], snap).waiting[s.id]
    assert reason == (
        "keypair at its concurrency limit (0/0 sessions); "
        "quota exceeded: keypair policy 'p': cpu 1 > 0, mem 1073741824 > 0"
    )


def test_limits_hold_across_sessions_of_one_cycle() -> None:
    t = Tenancy(keypairs={"AK1": KeypairPolicy(max_concurrent_sessions=2)})
    snap = snapshot(agent("a", cpu=16), tenancy=t)
    sessions = [session(created=i) for i in range(4)]
    plan = provisioner_for(snap).plan(sessions, snap)
    assert len(plan.placements) == 2
    assert all("concurrency limit (2/2" in plan.waiting[s.id] for s in sessions[2:])


@pytest.mark.parametrize(("policy", "placed"), [("backfill", ["big-blocked", "small"]), ("block", [])])
def test_block_or_backfill_behind_a_session_that_does_not_fit(policy: str, placed: list[str]) -> None:
    snap = snapshot(agent("a", cpu=4, used_cpu=2), queue_policy=policy)
    big, small = session(cpu=4, created=0), session(cpu=1, created=1)
    plan = provisioner_for(snap).plan([big, small], snap)
    names = {big.id: "big-blocked", small.id: "small"}
    assert [names[p.session_id] for p in plan.placements] == [n for n in placed if n == "small"]
    if policy == "block":
        assert plan.waiting[small.id] == f"queued behind session {big.id} (queue policy: block)"


def test_a_session_waiting_for_a_validator_does_not_block() -> None:
    t = Tenancy(keypairs={"AK2": KeypairPolicy(max_concurrent_sessions=0)})
    snap = snapshot(agent("a"), queue_policy="block", tenancy=t)
    limited, other = session(owner="AK2", created=0), session(owner="AK1", created=1)
    plan = provisioner_for(snap).plan([limited, other], snap)
    assert [p.session_id for p in plan.placements] == [other.id]


def test_a_rejected_session_is_not_placed_and_says_why() -> None:
    snap = snapshot(agent("a"), allowed_session_types=frozenset({"batch"}))
    s = session(type="interactive")
    plan = provisioner_for(snap).plan([s], snap)
    assert plan.placements == []
    assert plan.rejected[s.id][0] == "VALIDATION_ERROR"


def test_a_rescheduled_session_avoids_the_agent_it_failed_on_unless_it_is_the_only_one() -> None:
    from dataclasses import replace

    s = replace(session(), status_info={"avoid_agents": ["a"]})
    both = snapshot(agent("a", used_cpu=3), agent("b"))  # concentrated alone would pick a (fuller)
    (placement,) = provisioner_for(both).plan([s], both).placements
    assert set(placement.kernels.values()) == {"b"}
    only = snapshot(agent("a"))
    (placement,) = provisioner_for(only).plan([s], only).placements
    assert set(placement.kernels.values()) == {"a"}


async def test_planning_cooperatively_is_the_same_plan_and_lets_other_tasks_run() -> None:
    """The placement lane plans thousands of sessions in steps, handing the event loop back between
    them (the API and the event consumer share the process); the plan is the one `plan` makes."""
    sessions = [session(cpu=1, created=i) for i in range(1000)]
    at_once, in_steps = (snapshot(*(agent(f"a{i:03d}", cpu=4) for i in range(200))) for _ in range(2))
    expected = provisioner_for(at_once).plan(sessions, at_once)
    turns = 0

    async def other_task() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other_task())
    await asyncio.sleep(0)
    started = turns
    got = await provisioner_for(in_steps).plan_cooperatively(sessions, in_steps)
    task.cancel()
    assert [(p.session_id, p.kernels) for p in got.placements] == [
        (p.session_id, p.kernels) for p in expected.placements
    ]
    assert got.waiting == expected.waiting and len(got.placements) == 800
    assert turns - started >= len(sessions) // YIELD_EVERY - 1
