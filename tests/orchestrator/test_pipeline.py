"""The placement pipeline over in-memory snapshots: tables of input → plan."""

from __future__ import annotations

import pytest

from sokovan.common.types import AgentStatus
from sokovan.orchestrator.provisioner import registry
from sokovan.orchestrator.provisioner.pipeline import Provisioner
from sokovan.orchestrator.provisioner.snapshot import KeypairLimits
from tests.orchestrator.factories import agent, session, snapshot


def provisioner() -> Provisioner:
    return Provisioner(registry.validators(), registry.sequencer("fifo"), registry.selector("concentrated"))


def test_concentrated_picks_the_fullest_agent_that_fits() -> None:
    snap = snapshot(agent("a", used_cpu=1), agent("b", used_cpu=3), agent("c", used_cpu=0))
    s = session(cpu=1)
    plan = provisioner().plan([s], snap)
    assert [set(p.kernels.values()) for p in plan.placements] == [{"b"}]


def test_the_snapshot_is_updated_between_placements() -> None:
    snap = snapshot(agent("a", cpu=2))
    first, second, third = session(cpu=1, created=0), session(cpu=1, created=1), session(cpu=1, created=2)
    plan = provisioner().plan([third, second, first], snap)
    assert [p.session_id for p in plan.placements] == [first.id, second.id]
    assert plan.waiting[third.id] == "0/1 agents fit: 1 insufficient cpu"


@pytest.mark.parametrize(
    ("agents", "reason"),
    [
        ([agent("a", cpu=1), agent("b", cpu=1)], "0/2 agents fit: 2 insufficient cpu"),
        (
            [agent("a", cpu=1), agent("b", status=AgentStatus.DOWN)],
            "0/2 agents fit: 1 insufficient cpu, 1 not READY",
        ),
        ([agent("a", images=("shell",))], "0/1 agents fit: 1 image not offered"),
        ([agent("a", max_kernels=0)], "0/1 agents fit: 1 at kernel limit"),
        ([], "0/0 agents fit"),
    ],
)
def test_pending_reason_counts_every_agent(agents: list[object], reason: str) -> None:
    s = session(cpu=2)
    plan = provisioner().plan([s], snapshot(*agents))  # type: ignore[arg-type]
    assert plan.placements == []
    assert plan.waiting[s.id] == reason


def test_priority_band_goes_first_then_creation_order() -> None:
    snap = snapshot(agent("a", cpu=1))
    old_low, new_high = session(priority=10, created=0), session(priority=50, created=5)
    plan = provisioner().plan([old_low, new_high], snap)
    assert [p.session_id for p in plan.placements] == [new_high.id]


def test_single_node_cluster_puts_all_kernels_on_one_agent() -> None:
    snap = snapshot(agent("a", cpu=2), agent("b", cpu=4))
    s = session(cpu=2, size=2)
    (placement,) = provisioner().plan([s], snap).placements
    assert set(placement.kernels.values()) == {"b"}


def test_multi_node_cluster_spreads_kernels_all_or_nothing() -> None:
    s = session(cpu=1, size=3, mode="multi-node")
    plan = provisioner().plan([s], snapshot(agent("a"), agent("b")))
    assert plan.placements == []
    assert plan.waiting[s.id].startswith("multi-node needs 3 agents")
    (placement,) = provisioner().plan([s], snapshot(agent("a"), agent("b"), agent("c"))).placements
    assert sorted(placement.kernels.values()) == ["a", "b", "c"]


def test_concurrency_limit_makes_a_session_wait() -> None:
    snap = snapshot(agent("a"))
    snap.limits = {"AK1": KeypairLimits(max_concurrent_sessions=1)}
    first, second = session(created=0), session(created=1)
    plan = provisioner().plan([first, second], snap)
    assert [p.session_id for p in plan.placements] == [first.id]
    assert "concurrency limit" in plan.waiting[second.id]


@pytest.mark.parametrize("name", ["drf-typo", "", "FIFO"])
def test_unknown_stage_names_are_errors(name: str) -> None:
    with pytest.raises(registry.UnknownStage):
        registry.sequencer(name)
    with pytest.raises(registry.UnknownStage):
        registry.selector(name)
