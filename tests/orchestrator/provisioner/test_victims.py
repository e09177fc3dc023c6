"""Victim selection (CONTRACT section 9), pure: tables of agents + running sessions → victims.

Agents are written as `name: capacity` and candidates as (name, priority, created, cpu per agent),
so every case reads as the situation it describes."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from sokovan.common.preemption import PreemptionMode, PreemptionSettings
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus
from sokovan.orchestrator.provisioner.build import provisioner_for
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, Candidate, Hold, VictimKernel
from sokovan.orchestrator.provisioner.victims import select_victims
from tests.orchestrator.factories import T0, agent, session, snapshot

Spec = tuple[str, int, int, dict[str, int]]  # name, priority, created (s), agent → cpu held there


def cands(specs: list[Spec], preemptible: bool = True) -> tuple[list[Candidate], dict[uuid.UUID, str]]:
    out, names = [], {}
    for name, priority, created, where in specs:
        cid = uuid.uuid4()
        names[cid] = name
        kernels = tuple(
            VictimKernel(a, ResourceSlots.parse({"cpu": cpu, "mem": "1g"})) for a, cpu in where.items()
        )
        out.append(Candidate(cid, priority, preemptible, T0 + dt.timedelta(seconds=created), kernels))
    return out, names


def full(name: str, specs: list[Spec], cpu: int = 4, **kw: object) -> AgentSnapshot:
    """An agent whose occupancy is what the candidates on it hold (plus `used_cpu`)."""
    used = sum(c for _, _, _, where in specs for a, c in where.items() if a == name)
    extra = kw.pop("used_cpu", 0)
    a = agent(name, cpu=cpu, mem="64g", used_cpu=used + extra, **kw)  # type: ignore[arg-type]
    a.kernel_count = sum(1 for _, _, _, where in specs if name in where)
    return a


FOUR_P5 = [("v1", 5, 1, {"a": 1}), ("v2", 5, 2, {"a": 1}), ("v3", 5, 3, {"a": 1}), ("v4", 5, 4, {"a": 1})]


@pytest.mark.parametrize(
    ("case", "specs", "agents", "need", "priority", "want"),
    [
        # The case: four cpu=1 p5 sessions; a cpu=2 p50 session takes exactly the two newest.
        ("two newest", FOUR_P5, ["a"], 2, 50, ({"v3", "v4"}, ["a"])),
        # Lowest priority first, whatever their age.
        (
            "lowest priority first",
            [("old_p1", 1, 1, {"a": 1}), ("new_p5", 5, 9, {"a": 1}), ("mid_p3", 3, 5, {"a": 2})],
            ["a"],
            1,
            50,
            ({"old_p1"}, ["a"]),
        ),
        # Never more than needed: a big low-priority victim alone suffices, the small one is dropped.
        (
            "unneeded victim dropped",
            [("small_p1", 1, 9, {"a": 1}), ("big_p2", 2, 1, {"a": 3})],
            ["a"],
            3,
            50,
            ({"big_p2"}, ["a"]),
        ),
        # Equal priority is never preempted.
        ("equal priority never", FOUR_P5, ["a"], 2, 5, None),
        # To no avail: not even every victim frees cpu=5 on a cpu=4 agent.
        ("to no avail never", FOUR_P5, ["a"], 5, 50, None),
        # Among agents: the lowest highest-victim priority wins, even needing more victims.
        (
            "lowest highest priority",
            [
                ("a_p8", 8, 1, {"a": 2}),
                ("a_p9", 9, 2, {"a": 2}),
                ("b_p3", 3, 1, {"b": 1}),
                ("b_p4", 4, 2, {"b": 1}),
                ("b_p2", 2, 3, {"b": 2}),
            ],
            ["a", "b"],
            4,
            50,
            ({"b_p3", "b_p4", "b_p2"}, ["b"]),
        ),
        # Then the fewest victims: one on agent b beats two on agent a (all p5; the case).
        (
            "fewest victims",
            [("a1", 5, 1, {"a": 2}), ("a2", 5, 2, {"a": 1}), ("a3", 5, 3, {"a": 1}), ("b1", 5, 1, {"b": 4})],
            ["a", "b"],
            2,
            50,
            ({"b1"}, ["b"]),
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_single_node_choices(
    case: str,
    specs: list[Spec],
    agents: list[str],
    need: int,
    priority: int,
    want: tuple[set[str], list[str]] | None,
) -> None:
    candidates, names = cands(specs)
    snaps = [full(a, specs) for a in agents]
    preemptor = session(cpu=need, priority=priority)
    got = select_victims(preemptor, snaps, candidates)
    if want is None:
        assert got is None, case
        return
    assert got is not None, case
    assert ({names[v] for v in got.victims}, list(got.agents)) == want, case


def test_non_preemptible_sessions_are_never_victims() -> None:
    candidates, _ = cands(FOUR_P5, preemptible=False)
    assert select_victims(session(cpu=2, priority=50), [full("a", FOUR_P5)], candidates) is None


@pytest.mark.parametrize(
    ("why", "kw"),
    [
        ("not READY", {"status": AgentStatus.DRAINING}),
        ("image not offered", {"images": ("shell",)}),
    ],
)
def test_an_agent_that_could_not_take_the_session_is_never_a_target(why: str, kw: dict[str, object]) -> None:
    candidates, _ = cands(FOUR_P5)
    assert select_victims(session(cpu=2, priority=50), [full("a", FOUR_P5, **kw)], candidates) is None, why


def test_victims_taken_for_another_preemptor_are_not_chosen_again() -> None:
    candidates, names = cands(FOUR_P5)
    taken = {c.id for c in candidates if names[c.id] in ("v3", "v4")}
    got = select_victims(session(cpu=2, priority=50), [full("a", FOUR_P5)], candidates, taken)
    assert got is not None
    assert {names[v] for v in got.victims} == {"v1", "v2"}


def test_kernel_limit_counts_the_released_kernels() -> None:
    # max_kernels=4 and four kernels: one victim releases a kernel slot as well as cpu.
    specs = [("v1", 5, 1, {"a": 1}), ("v2", 5, 2, {"a": 1}), ("v3", 5, 3, {"a": 1}), ("v4", 5, 4, {"a": 1})]
    candidates, names = cands(specs)
    a = full("a", specs, cpu=8, max_kernels=4)  # cpu to spare, but at its kernel limit
    got = select_victims(session(cpu=1, priority=50), [a], candidates)
    assert got is not None and [names[v] for v in got.victims] == ["v4"]


def test_room_held_for_a_higher_nominee_is_not_free() -> None:
    specs = [("v1", 5, 1, {"a": 2})]
    candidates, _ = cands(specs)
    a = full("a", specs, used_cpu=0)  # 2 of 4 used by v1, 2 free...
    a.held.append(Hold(uuid.uuid4(), 60, ResourceSlots.parse({"cpu": 2}), 1))  # ... but held for p60
    # cpu=4 needs v1's 2 and the 2 held: held room is not the p50 session's
    assert select_victims(session(cpu=4, priority=50), [a], candidates) is None
    # a p70 session does not see the p60 hold
    assert select_victims(session(cpu=4, priority=70), [a], candidates) is not None


def test_single_node_cluster_needs_all_kernels_on_one_agent() -> None:
    specs = [("a1", 5, 1, {"a": 2}), ("b1", 5, 1, {"b": 2}), ("c1", 5, 1, {"c": 4})]
    candidates, names = cands(specs)
    agents = [full("a", specs, used_cpu=2), full("b", specs, used_cpu=2), full("c", specs)]
    got = select_victims(session(cpu=2, size=2, priority=50), agents, candidates)
    assert got is not None
    assert ({names[v] for v in got.victims}, list(got.agents)) == ({"c1"}, ["c", "c"])


def test_multi_node_spreads_over_distinct_agents_taking_victims_on_each() -> None:
    specs = [("a1", 5, 1, {"a": 4}), ("b1", 5, 1, {"b": 4}), ("c1", 3, 1, {"c": 4})]
    candidates, names = cands(specs)
    agents = [full("a", specs), full("b", specs), full("c", specs)]
    got = select_victims(session(cpu=2, size=2, mode="multi-node", priority=50), agents, candidates)
    assert got is not None
    # c (victim p3) first, then a (p5, by agent order)
    assert ({names[v] for v in got.victims}, sorted(got.agents)) == ({"c1", "a1"}, ["a", "c"])


def test_multi_node_uses_free_agents_first_and_counts_a_spanning_victim_once() -> None:
    # One victim spans a and b; c is free: the session needs 3 agents, one victim is enough.
    specs = [("ab", 5, 1, {"a": 4, "b": 4}), ("x", 5, 2, {"a": 1})]
    candidates, names = cands(specs)
    a = full("a", specs, cpu=5)
    agents = [a, full("b", specs), agent("c", cpu=4, mem="64g")]
    got = select_victims(session(cpu=2, size=3, mode="multi-node", priority=50), agents, candidates)
    assert got is not None
    assert [names[v] for v in got.victims] == ["ab"]
    assert sorted(got.agents) == ["a", "b", "c"]
    assert got.victim_agents[got.victims[0]] == ("a", "b")


def test_multi_node_needs_enough_agents_or_none() -> None:
    specs = [("a1", 5, 1, {"a": 4})]
    candidates, _ = cands(specs)
    got = select_victims(
        session(cpu=2, size=2, mode="multi-node", priority=50), [full("a", specs)], candidates
    )
    assert got is None


# -- in the pipeline ----------------------------------------------------------------------------


def preempting(*agents: AgentSnapshot, candidates: list[Candidate], mode: str = "terminate") -> object:
    return snapshot(*agents, preemption=PreemptionSettings(mode=PreemptionMode(mode)), candidates=candidates)


def test_pipeline_preempts_only_when_the_mode_is_on() -> None:
    candidates, names = cands(FOUR_P5)
    urgent = session(cpu=2, priority=50)
    off = preempting(full("a", FOUR_P5), candidates=candidates, mode="off")
    plan = provisioner_for(off).plan([urgent], off)  # type: ignore[arg-type]
    assert plan.preemptions == []
    assert plan.waiting[urgent.id] == "0/1 agents fit: 1 insufficient cpu"
    on = preempting(full("a", FOUR_P5), candidates=candidates)
    plan = provisioner_for(on).plan([urgent], on)  # type: ignore[arg-type]
    (p,) = plan.preemptions
    assert {names[v] for v in p.victims} == {"v3", "v4"}
    assert urgent.id not in plan.waiting


def test_pipeline_says_why_when_no_victims_help() -> None:
    candidates, _ = cands(FOUR_P5)
    snap = preempting(full("a", FOUR_P5), candidates=candidates)
    s = session(cpu=2, priority=5)
    plan = provisioner_for(snap).plan([s], snap)  # type: ignore[arg-type]
    assert plan.waiting[s.id] == (
        "0/1 agents fit: 1 insufficient cpu; no lower-priority preemptible sessions would free enough room"
    )


def test_pipeline_never_preempts_for_a_session_a_validator_holds_back() -> None:
    from sokovan.orchestrator.provisioner.snapshot import KeypairPolicy, Tenancy

    candidates, _ = cands(FOUR_P5)
    t = Tenancy(keypairs={"AK1": KeypairPolicy(max_concurrent_sessions=0)})
    snap = preempting(full("a", FOUR_P5), candidates=candidates)
    snap.tenancy = t  # type: ignore[attr-defined]
    s = session(cpu=2, priority=50)
    plan = provisioner_for(snap).plan([s], snap)  # type: ignore[arg-type]
    assert plan.preemptions == []
    assert plan.waiting[s.id].startswith("keypair at its concurrency limit")


def test_pipeline_victims_are_not_shared_and_freed_room_is_held_in_the_cycle() -> None:
    candidates, names = cands(FOUR_P5)
    snap = preempting(full("a", FOUR_P5), candidates=candidates)
    first, second, third = (session(cpu=2, priority=50, created=i) for i in range(3))
    plan = provisioner_for(snap).plan([first, second, third], snap)  # type: ignore[arg-type]
    by = {p.session_id: {names[v] for v in p.victims} for p in plan.preemptions}
    assert by == {first.id: {"v3", "v4"}, second.id: {"v1", "v2"}}
    assert third.id in plan.waiting


def test_pipeline_room_held_for_a_nominee_refuses_lower_or_equal_priority() -> None:
    nominee = uuid.uuid4()
    a = agent("a", cpu=4, mem="64g", used_cpu=2)
    a.held.append(Hold(nominee, 50, ResourceSlots.parse({"cpu": 2, "mem": "1g"}), 1))
    snap = snapshot(a)
    low, equal, high = session(cpu=2, priority=5), session(cpu=2, priority=50), session(cpu=2, priority=60)
    plan = provisioner_for(snap).plan([low, equal], snap)
    assert plan.placements == []
    assert plan.waiting[low.id] == "0/1 agents fit: 1 room held for a preempting session"
    snap = snapshot(a)
    plan = provisioner_for(snap).plan([high], snap)
    assert [p.session_id for p in plan.placements] == [high.id]
