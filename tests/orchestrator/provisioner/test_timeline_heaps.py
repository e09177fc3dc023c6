"""The timeline's heaps (`provisioner.timeline`) against a plain walk over every agent: random
agents, live sessions, bookings and placements, and, with a `TimelineMemo`, plans one after the
other while sessions end and start between them (room that grows as well as room that shrinks).
The walk is `Timeline.earliest(session, not_before=now)`, which asks every agent's line."""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import uuid

import pytest

from sokovan.common.slots import ResourceSlots
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, Occupant, ScalingGroupSnapshot
from sokovan.orchestrator.provisioner.timeline import Timeline
from sokovan.orchestrator.provisioner.timeline_memo import TimelineMemo
from sokovan.state.session_reads import SessionWithKernels
from tests.orchestrator.factories import T0, agent, session, snapshot

AGENTS = 24


def _session(rng: random.Random) -> SessionWithKernels:
    spread = rng.random() < 0.2
    s = session(
        cpu=rng.choice((1, 2, 4, 8)),
        mem="1g",
        size=2 if spread else 1,
        mode="multi-node" if spread else "single-node",
        priority=rng.choice((5, 10)),
    )
    return dataclasses.replace(s, max_duration=rng.choice((None, 30, 100, 400)))


def _occupants(rng: random.Random, agents: list[AgentSnapshot], now: dt.datetime) -> list[Occupant]:
    """Each agent's used cpu as one or two live sessions, ending before `now` (overdue), after it,
    or never known."""
    out = []
    for a in agents:
        used = int(a.occupied.get("cpu", 0))
        while used > 0:
            part = rng.randint(1, used)
            used -= part
            ends = rng.choice((None, -20, 10, 60, 200, 500))
            at = now + dt.timedelta(seconds=ends) if ends is not None else None
            out.append(Occupant(uuid.uuid4(), a.id, ResourceSlots.parse({"cpu": part}), 1, at))
    return out


def _agents(rng: random.Random) -> list[AgentSnapshot]:
    return [agent(f"a{i:02d}", cpu=8, used_cpu=rng.randint(0, 8)) for i in range(AGENTS)]


def _walk(timeline: Timeline, s: SessionWithKernels) -> tuple[dt.datetime, tuple[str, ...]] | None:
    return timeline.earliest(s, not_before=timeline.now)


def _act(rng: random.Random, timeline: Timeline, snap: ScalingGroupSnapshot, steps: int) -> int:
    """Ask, compare with the walk, then book the answer or place the session where it fits now."""
    compared = 0
    for _ in range(steps):
        s = _session(rng)
        fast = timeline.earliest(s)
        assert fast == _walk(timeline, s), s
        compared += fast is not None
        if fast is None:
            continue
        when, where = fast
        if when <= timeline.now and rng.random() < 0.5 and len(set(where)) == len(where):
            for agent_id in where:  # placed: its room taken now, back at its end
                next(a for a in snap.agents if a.id == agent_id).take(s.resources, 1)
            timeline.occupy(s, where)
        else:
            timeline.book(s, when, where, for_ever=rng.random() < 0.2)
    return compared


@pytest.mark.parametrize("seed", range(12))
def test_the_heaps_answer_as_a_walk_over_every_agent_does(seed: int) -> None:
    rng = random.Random(seed)
    agents = _agents(rng)
    snap = snapshot(*agents, now=T0)
    snap.occupants = _occupants(rng, agents, T0)
    assert _act(rng, Timeline.build(snap, []), snap, 40) > 0


@pytest.mark.parametrize("seed", range(8))
def test_a_memo_kept_between_plans_answers_as_a_fresh_timeline_does(seed: int) -> None:
    rng = random.Random(seed)
    agents = _agents(rng)
    live: dict[str, dict[uuid.UUID, Occupant]] = {a.id: {} for a in agents}
    for o in _occupants(rng, agents, T0):
        live[o.agent_id][o.session_id] = o
    memo = TimelineMemo(lambda agent_id: live[agent_id].values())
    now = T0
    for _ in range(10):
        snap = snapshot(*agents, now=now, timeline_memo=memo)
        snap.occupants = [o for per in live.values() for o in per.values()]
        kept = Timeline.build(snap, [])
        _act(rng, kept, snap, 12)
        # what the pipeline's bookings and placements did lives for this plan only: the agents'
        # room is set again below, as the next cycle would read it
        now += dt.timedelta(seconds=rng.choice((0, 5, 40)))
        for a in rng.sample(agents, 6):  # sessions end (room grows) and start (room shrinks)
            live[a.id] = {}
            used = rng.randint(0, 8)
            if used:
                ends = now + dt.timedelta(seconds=rng.choice((-5, 15, 90, 300)))
                o = Occupant(uuid.uuid4(), a.id, ResourceSlots.parse({"cpu": used}), 1, ends)
                live[a.id][o.session_id] = o
            a.occupied = ResourceSlots.parse({"cpu": used})
            a.free = a.available - a.occupied
            memo.changed(a.id)
        for a in agents:  # placements of the plan above are undone too (the simulator keeps them)
            cpu = sum(int(o.slots["cpu"]) for o in live[a.id].values())
            if a.occupied.get("cpu", 0) != cpu:
                a.occupied = ResourceSlots.parse({"cpu": cpu})
                a.free = a.available - a.occupied
                memo.changed(a.id)
        snap = snapshot(*agents, now=now, timeline_memo=memo)
        snap.occupants = [o for per in live.values() for o in per.values()]
        fresh_snap = snapshot(*agents, now=now)
        fresh_snap.occupants = snap.occupants
        kept, fresh = Timeline.build(snap, []), Timeline.build(fresh_snap, [])
        for _ in range(10):
            s = _session(rng)
            assert kept.earliest(s) == fresh.earliest(s) == _walk(fresh, s)
