"""Selectors, table-driven: concentrated and dispersed are mirror images; round-robin cycles."""

from __future__ import annotations

import pytest

from sokovan.orchestrator.provisioner import registry
from sokovan.orchestrator.provisioner.build import provisioner_for
from tests.orchestrator.factories import agent, session, snapshot


@pytest.mark.parametrize(("selector", "want"), [("concentrated", "b"), ("dispersed", "c")])
def test_fullest_vs_emptiest_fitting_agent(selector: str, want: str) -> None:
    agents = [agent("a", used_cpu=1), agent("b", used_cpu=3), agent("c", used_cpu=0), agent("d", cpu=0)]
    snap = snapshot(*agents)
    chosen = registry.selector(selector).pick(session(), [a for a in agents if a.id != "d"], snap)
    assert chosen.id == want


def test_resource_priority_decides_which_slot_counts_first() -> None:
    # a: little cpu free, lots of mem; b: lots of cpu free, little mem.
    a, b = agent("a", cpu=2, mem="32g"), agent("b", cpu=16, mem="2g")
    pick = registry.selector("concentrated").pick
    assert pick(session(), [a, b], snapshot(a, b, resource_priority=("cpu", "mem"))).id == "a"
    assert pick(session(), [a, b], snapshot(a, b, resource_priority=("mem", "cpu"))).id == "b"


def test_round_robin_cycles_and_remembers_its_place() -> None:
    agents = [agent("c"), agent("a"), agent("b")]
    snap = snapshot(*agents, agent_selection="roundrobin")
    rr = registry.selector("roundrobin")
    picks = [rr.pick(session(), agents, snap).id for _ in range(4)]
    assert picks == ["a", "b", "c", "a"]
    assert snap.roundrobin_cursor == "a"
    # A new cycle (and a new selector, as in another manager) continues from the stored cursor.
    again = snapshot(*agents, agent_selection="roundrobin", roundrobin_cursor="a")
    assert registry.selector("roundrobin").pick(session(), agents, again).id == "b"


def test_round_robin_skips_agents_that_do_not_fit() -> None:
    agents = [agent("a"), agent("b", cpu=0), agent("c")]
    snap = snapshot(*agents, agent_selection="roundrobin", roundrobin_cursor="a")
    plan = provisioner_for(snap).plan([session(cpu=1)], snap)
    assert list(plan.placements[0].kernels.values()) == ["c"]
    assert plan.roundrobin_cursor == "c"


@pytest.mark.parametrize("name", ["drf-typo", "", "FIFO", "random"])
def test_unknown_stage_names_are_errors(name: str) -> None:
    with pytest.raises(registry.UnknownStage):
        registry.sequencer(name)
    with pytest.raises(registry.UnknownStage):
        registry.selector(name)
    with pytest.raises(registry.UnknownStage):
        registry.queue_policy(name)
