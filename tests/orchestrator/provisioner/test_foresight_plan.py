"""Scheduler foresight over the pure pipeline: the `reserve` queue policy's reservation and the
start-time estimates (CONTRACT section 16), on hand-made snapshots whose answers are known."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

from sokovan.common import foresight
from sokovan.common.slots import ResourceSlots
from sokovan.orchestrator.provisioner.build import provisioner_for
from sokovan.orchestrator.provisioner.estimates import UNBOUNDED
from sokovan.orchestrator.provisioner.reasons import AgentRefusal
from sokovan.orchestrator.provisioner.snapshot import Occupant, Plan, ScalingGroupSnapshot
from sokovan.state.session_reads import SessionWithKernels
from tests.orchestrator.factories import T0, agent, session, snapshot


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def occupant(agent_id: str, cpu: int, ends: float | None) -> Occupant:
    return Occupant(
        uuid.uuid4(), agent_id, ResourceSlots.parse({"cpu": cpu}), 1, at(ends) if ends is not None else None
    )


def declared(s: SessionWithKernels, seconds: int | None) -> SessionWithKernels:
    return dataclasses.replace(s, max_duration=seconds)


def two_busy_agents(queue_policy: str) -> ScalingGroupSnapshot:
    """a1: 6 of 8 cpu held until +100 s; a2: all 4 held until +200 s."""
    snap = snapshot(
        agent("a1", cpu=8, used_cpu=6), agent("a2", used_cpu=4), queue_policy=queue_policy, now=T0
    )
    snap.occupants = [occupant("a1", 6, 100), occupant("a2", 4, 200)]
    return snap


def plan(sessions: list[SessionWithKernels], snap: ScalingGroupSnapshot) -> Plan:
    return provisioner_for(snap).plan(sessions, snap)


def test_reserve_holds_the_room_a_big_session_needs_and_lets_only_what_ends_before_pass() -> None:
    big = declared(session(cpu=8, mem="1g", created=0), 300)
    short = declared(session(cpu=1, mem="1g", created=1), 50)  # ends at +50, before +100
    open_ended = session(cpu=1, mem="1g", created=2)
    too_long = declared(session(cpu=1, mem="1g", created=3), 200)
    snap = two_busy_agents("reserve")
    result = plan([big, short, open_ended, too_long], snap)
    reservation = result.reservations[big.id]
    assert reservation.agents == ("a1",) and reservation.at == at(100)
    assert [p.session_id for p in result.placements] == [short.id]
    assert AgentRefusal.RESERVED in result.waiting[open_ended.id]
    assert AgentRefusal.RESERVED in result.waiting[too_long.id]
    assert result.estimates[big.id].at == at(100)
    assert result.estimates[big.id].reason.startswith("reserved: room held on a1")


def test_backfill_lets_the_stream_take_the_room_the_big_session_waits_for() -> None:
    big = declared(session(cpu=8, mem="1g", created=0), 300)
    open_ended = session(cpu=1, mem="1g", created=2)
    result = plan([big, open_ended], two_busy_agents("backfill"))
    assert [p.session_id for p in result.placements] == [open_ended.id]
    assert not result.reservations
    # the one placed now holds its room for ever in the model: nothing bounds the big one's start
    assert result.estimates[big.id].at is None and result.estimates[big.id].reason == UNBOUNDED


def test_a_session_fitting_beside_the_reservation_is_placed() -> None:
    big = declared(session(cpu=2, mem="1g", created=0), 300)
    snap = snapshot(agent("a1", used_cpu=3), queue_policy="reserve", now=T0)
    snap.occupants = [occupant("a1", 1, 100), occupant("a1", 2, 400)]
    # by +100 one cpu is released: the big one needs 2, so one of the free cpu is held, one is not
    beside = session(cpu=1, mem="1g", created=1)
    result = plan([big, beside], snap)
    assert result.reservations[big.id].at == at(100)
    assert [p.session_id for p in result.placements] == []  # a1 has 1 free, held for the big one
    snap = snapshot(agent("a1", cpu=8, used_cpu=3), queue_policy="reserve", now=T0)
    snap.occupants = [occupant("a1", 3, 100)]
    big8 = declared(session(cpu=8, mem="1g", created=0), 300)
    result = plan([big8, beside], snap)
    assert result.reservations[big8.id].at == at(100)
    assert beside.id in result.waiting  # all 5 free cpu are needed at +100
    big6 = declared(session(cpu=6, mem="1g", created=0), 300)
    snap = snapshot(agent("a1", cpu=8, used_cpu=3), queue_policy="reserve", now=T0)
    snap.occupants = [occupant("a1", 3, 100)]
    result = plan([big6, beside], snap)  # 6 needed at +100: 5 free + 3 released leaves 2 beside it
    assert result.reservations[big6.id].at == at(100)
    assert [p.session_id for p in result.placements] == [beside.id]


def test_estimates_queue_each_behind_the_ones_ahead() -> None:
    snap = snapshot(agent("a1", used_cpu=4), now=T0)
    snap.occupants = [occupant("a1", 4, 60)]
    queue = [declared(session(cpu=4, mem="1g", created=i), 60) for i in range(3)]
    result = plan(queue, snap)
    assert [result.estimates[s.id].at for s in queue] == [at(60), at(120), at(180)]


def test_learned_run_times_bound_what_declares_none() -> None:
    snap = snapshot(agent("a1", used_cpu=4), now=T0)
    snap.occupants = [occupant("a1", 4, 30)]
    snap.learned = {("AK1", "python:3"): 45.0}
    first, second = session(cpu=4, mem="1g", created=0), session(cpu=4, mem="1g", created=1)
    result = plan([first, second], snap)
    assert result.estimates[first.id].at == at(30)
    assert result.estimates[second.id].at == at(75)


def test_nothing_bounds_a_start_behind_an_open_ended_session() -> None:
    snap = snapshot(agent("a1", used_cpu=4), now=T0)
    snap.occupants = [occupant("a1", 4, None)]
    waiting = session(cpu=1, mem="1g")
    result = plan([waiting], snap)
    assert result.estimates[waiting.id].at is None and result.estimates[waiting.id].reason == UNBOUNDED


def test_block_never_estimates_a_start_before_the_blocker() -> None:
    snap = snapshot(agent("a1", used_cpu=3), queue_policy="block", now=T0)
    snap.occupants = [occupant("a1", 3, 100)]
    big = declared(session(cpu=4, mem="1g", created=0), 50)
    small = declared(session(cpu=1, mem="1g", created=1), 10)
    result = plan([big, small], snap)
    assert result.estimates[big.id].at == at(100)
    assert result.estimates[small.id].at == at(150)  # after the big one, which takes all of a1


def test_a_reservation_nothing_bounds_holds_the_roomiest_agent_for_good() -> None:
    snap = snapshot(agent("a1", used_cpu=3), agent("a2", used_cpu=2), queue_policy="reserve", now=T0)
    snap.occupants = [occupant("a1", 3, None), occupant("a2", 2, None)]
    big = session(cpu=4, mem="1g", created=0)
    short = declared(session(cpu=1, mem="1g", created=1), 5)
    result = plan([big, short], snap)
    reservation = result.reservations[big.id]
    assert reservation.agents == ("a2",) and reservation.at is None
    assert [(p.session_id, p.kernels) for p in result.placements] == [(short.id, {short.kernels[0].id: "a1"})]


def test_a_session_waiting_for_a_validator_is_not_estimated() -> None:
    snap = snapshot(agent("a1"), now=T0)
    dep = uuid.uuid4()
    snap.tenancy.dependencies[dep] = ("RUNNING", None)
    waiting = session(cpu=1, mem="1g", depends_on=(dep,))
    result = plan([waiting], snap)
    assert result.estimates[waiting.id].at is None
    assert result.estimates[waiting.id].reason.startswith("not estimated: it waits for")


def test_an_estimate_is_rewritten_only_when_it_moved_enough() -> None:
    now = at(0)
    old = {"estimated_start_at": foresight.iso(at(100)), "estimate_reason": "r"}
    assert not foresight.changed(old, {**old, "estimated_start_at": foresight.iso(at(105))}, now)
    assert foresight.changed(old, {**old, "estimated_start_at": foresight.iso(at(120))}, now)
    assert foresight.changed(old, {**old, "estimated_start_at": None}, now)
    assert foresight.changed({}, old, now)
    reserved = {**old, "reservation": {"agents": ["a1"], "at": foresight.iso(at(100))}}
    assert foresight.changed(old, reserved, now)
    assert foresight.changed(reserved, {**reserved, "reservation": {"agents": ["a2"], "at": None}}, now)
    assert not foresight.changed(reserved, dict(reserved), now)


def test_a_big_session_behind_an_older_small_one_is_reserved_too() -> None:
    """When the group is full every waiting session is "first" in turn: the reservations go to
    the first few that do not fit, so a big one behind an older small one keeps its room."""
    snap = snapshot(
        agent("a1", cpu=8, used_cpu=8), agent("a2", cpu=8, used_cpu=8), queue_policy="reserve", now=T0
    )
    snap.occupants = [occupant("a1", 8, 100), occupant("a2", 8, 200)]
    older = declared(session(cpu=1, mem="1g", created=0), 500)
    big = declared(session(cpu=8, mem="1g", created=1), 300)
    result = plan([older, big], snap)
    assert result.reservations[older.id].at == at(100) and result.reservations[older.id].agents == ("a1",)
    # a1 at +100 has 7 left once the older one starts: the big one's room is a2's at +200
    assert result.reservations[big.id].at == at(200) and result.reservations[big.id].agents == ("a2",)
    assert result.estimates[big.id].at == at(200)
