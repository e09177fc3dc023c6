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
    s = session()
    chosen = registry.selector(selector).pick(s, lambda a: a.can_take(s.image, s.resources, 1), snap)
    assert chosen is not None and chosen.id == want


def test_resource_priority_decides_which_slot_counts_first() -> None:
    # a: little cpu free, lots of mem; b: lots of cpu free, little mem.
    a, b = agent("a", cpu=2, mem="32g"), agent("b", cpu=16, mem="2g")

    def pick(priority: tuple[str, ...]) -> str | None:
        chosen = registry.selector("concentrated").pick(
            session(), lambda _: True, snapshot(a, b, resource_priority=priority)
        )
        return chosen.id if chosen else None

    assert pick(("cpu", "mem")) == "a"
    assert pick(("mem", "cpu")) == "b"


def test_round_robin_cycles_and_remembers_its_place() -> None:
    agents = [agent("c"), agent("a"), agent("b")]
    snap = snapshot(*agents, agent_selection="roundrobin")
    rr = registry.selector("roundrobin")
    picks = [getattr(rr.pick(session(), lambda _: True, snap), "id", None) for _ in range(4)]
    assert picks == ["a", "b", "c", "a"]
    assert snap.roundrobin_cursor == "a"
    # A new cycle (and a new selector, as in another manager) continues from the stored cursor.
    again = snapshot(*agents, agent_selection="roundrobin", roundrobin_cursor="a")
    chosen = registry.selector("roundrobin").pick(session(), lambda _: True, again)
    assert chosen is not None and chosen.id == "b"


def test_selectors_keep_their_order_as_agents_fill() -> None:
    agents = [agent("a", cpu=2), agent("b", cpu=3), agent("c", cpu=4)]
    snap = snapshot(*agents)
    plan = provisioner_for(snap).plan([session(cpu=1, created=i) for i in range(9)], snap)
    # Concentrated fills the fullest first: a (2), then b (3), then c (4).
    assert [next(iter(p.kernels.values())) for p in plan.placements] == [
        "a",
        "a",
        "b",
        "b",
        "b",
        "c",
        "c",
        "c",
        "c",
    ]
    dispersed = snapshot(
        *[agent("a", cpu=2), agent("b", cpu=3), agent("c", cpu=4)], agent_selection="dispersed"
    )
    plan = provisioner_for(dispersed).plan([session(cpu=1, created=i) for i in range(3)], dispersed)
    # c (4 free) first; then b and c both have 3 cpu free, but c has 1g less memory left: b.
    assert [next(iter(p.kernels.values())) for p in plan.placements] == ["c", "b", "c"]


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
