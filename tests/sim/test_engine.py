"""The virtual clock over the real provisioner: what each cycle's snapshot holds (what the loader
would read), and that the simulator's shortcuts change no placement."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from sokovan.common.slots import ResourceSlots
from sokovan.orchestrator.provisioner import build
from sokovan.orchestrator.provisioner.pipeline import Provisioner
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot
from sokovan.sim import engine
from sokovan.sim.engine import Combination, Simulation, simulate
from sokovan.sim.sessions import as_uuid
from sokovan.sim.synthetic import synthetic_trace
from tests.sim.handmade import at, session, trace


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[ScalingGroupSnapshot]:
    """Every snapshot the simulation plans over (as it is at planning time: copied)."""
    seen: list[ScalingGroupSnapshot] = []

    def provisioner_for(snapshot: ScalingGroupSnapshot) -> Provisioner:
        seen.append(
            type(snapshot)(
                **{
                    **vars(snapshot),
                    "agents": [copy.copy(a) for a in snapshot.agents],
                    "occupants": list(snapshot.occupants),
                    "learned": dict(snapshot.learned),
                    "user_allocated": {k: ResourceSlots(v) for k, v in snapshot.user_allocated.items()},
                }
            )
        )
        return build.provisioner_for(snapshot)

    monkeypatch.setattr(engine, "provisioner_for", provisioner_for)
    return seen


def test_each_cycle_sees_the_virtual_time_the_occupants_and_the_learned_run_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one agent of 4 CPUs: s1 (3 CPUs, no max_duration) runs 0-100 and teaches its (key, image)
    # 100 s; s2 (same owner and image, no max_duration) starts at 0 beside it; s3 declares 300 s;
    # s4 arrives at 150 and waits for room
    t = trace(
        [
            session("s1", 0, 3, 100),
            session("s2", 0, 1, 400),
            session("s3", 120, 3, 200, max_duration=300),
            session("s4", 150, 4, 10),
        ]
    )
    seen = _spy(monkeypatch)
    simulate(t, Combination("fifo"))
    by_time = {s.now: s for s in seen}
    # nothing to plan at 100 (no one waits); s4 waits from 150 until s3 (320) and s2 (400) end
    assert sorted(by_time) == [at(0), at(120), at(150), at(320), at(400)]
    first = by_time[at(0)]
    assert first.occupants == [] and first.learned == {}
    at120 = by_time[at(120)]
    assert at120.learned == {("AKALICE", "python:3"): 100.0}
    # s2 has run since 0 with no max_duration: its end is learned, 0 + 100
    assert [(o.slots, o.ends_at) for o in at120.occupants] == [
        (ResourceSlots.parse({"cpu": 1, "mem": "1g"}), at(100))
    ]
    at150 = by_time[at(150)]
    assert sorted((o.session_id, o.ends_at) for o in at150.occupants) == sorted(
        [(as_uuid("s2"), at(100)), (as_uuid("s3"), at(420))]  # s2 learned, s3 declared
    )
    # the agent as the loader would read it: s2 and s3 on it
    assert at150.agents[0].kernel_count == 2
    assert at150.agents[0].occupied == ResourceSlots.parse({"cpu": 4, "mem": "2g"})
    assert at150.agents[0].free == ResourceSlots.parse({"cpu": 0, "mem": "2g"})


def test_drf_sees_each_users_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    t = trace([session("s1", 0, 3, 100), session("s2", 10, 4, 10, user="bob"), session("s3", 11, 4, 10)])
    seen = _spy(monkeypatch)
    simulate(t, Combination("drf"))
    at10 = next(s for s in seen if s.now == at(10))
    assert {k: v for k, v in at10.user_allocated.items() if v.get("cpu")} == {
        as_uuid("alice"): ResourceSlots.parse({"cpu": 3, "mem": "1g"})
    }


def test_nothing_is_planned_where_nothing_happened(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    simulate(trace([session("s1", 0, 4, 100), session("s2", 1, 4, 10)]), Combination("fifo"))
    assert [s.now for s in seen] == [at(0), at(1), at(100)]


def test_room_held_by_a_reservation_lasts_one_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    t = trace(
        [session("s1", 0, 3, 100, max_duration=100), session("s2", 1, 4, 10), session("s3", 2, 1, 10)],
        agents=1,
    )
    sim = Simulation(t, Combination("fifo", "reserve"))
    sim.run()
    assert all(not a.held for g in sim.cluster.groups.values() for a in g.agents)


def _placements(out: engine.Outcome) -> list[tuple[str, tuple[str, ...], dt.datetime]]:
    return [(r.sim.trace.id, r.agents, r.start) for r in out.starts]


@pytest.mark.parametrize(
    ("combination"),
    [
        Combination("fifo", "backfill", "concentrated"),
        Combination("drf", "block", "dispersed"),
        Combination("fifo", "reserve", "concentrated"),
        Combination("drf", "reserve", "dispersed"),
        Combination("fair_share", "reserve", "concentrated"),
        Combination("lifo", "backfill", "roundrobin"),
    ],
)
def test_the_shortcuts_change_no_placement(combination: Combination) -> None:
    """A selector and a timeline kept between cycles, reservations made only when they could
    change a placement, and the reasons not counted, place as a fresh pipeline that makes every
    reservation and explains every refusal does."""
    t = synthetic_trace(400, 30, seed=5, load=1.1, burst=1.8)
    fast = simulate(t, combination, seed=1)
    plain = simulate(
        t,
        combination,
        seed=1,
        reuse_selector=False,
        explain=True,
        reuse_timeline=False,
        lazy_reservations=False,
    )
    assert _placements(fast) == _placements(plain)
    assert fast.starts  # the trace does place


def test_a_session_waiting_on_another_starts_after_it_ended() -> None:
    t = trace([session("s1", 0, 1, 50), session("s2", 1, 1, 10, depends_on=["s1"])], until=60)
    out = simulate(t, Combination("fifo"))
    assert [(r.sim.trace.id, r.start) for r in out.starts] == [("s1", at(0)), ("s2", at(50))]


def test_a_session_that_never_ran_runs_a_time_drawn_with_the_seed() -> None:
    # s2 was still pending at export: its run time comes from the runs of its key and image
    runs: list[Any] = [session(f"r{i}", i, 1, 10.0 * (i + 1)) for i in range(5)]
    t = trace([*runs, session("s2", 10, 1, None)], until=200)
    chosen = {seed: simulate(t, Combination("fifo"), seed=seed).sessions[-1].run for seed in range(8)}
    assert set(chosen.values()) <= {10.0, 20.0, 30.0, 40.0, 50.0}
    assert len(set(chosen.values())) > 1
    assert simulate(t, Combination("fifo"), seed=3).sessions[-1].run == chosen[3]


def test_learned_run_times_are_taken_again_at_most_every_learned_keep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # as the manager's processes keep what they read for LEARNED_KEEP (30 s): s1 ends at 100, s2
    # at 110; the plan at 105 takes 100, the one at 112 still sees it, the one at 140 the median
    t = trace(
        [
            session("s1", 0, 1, 100),
            session("s2", 0, 1, 110),
            session("p1", 105, 1, 1, user="bob"),
            session("p2", 112, 1, 1, user="bob"),
            session("p3", 140, 1, 1, user="bob"),
        ],
        until=200,
    )
    seen = _spy(monkeypatch)
    simulate(t, Combination("fifo"))
    learned = {s.now: s.learned.get(("AKALICE", "python:3")) for s in seen}
    assert (learned[at(105)], learned[at(112)], learned[at(140)]) == (100.0, 100.0, 105.0)
