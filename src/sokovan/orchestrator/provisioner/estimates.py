"""Foresight over one plan: the `reserve` queue policy's reservations and every waiting session's
start-time estimate, both from one model (`timeline.Timeline`).

The reservations: each of the first sessions of a `reserve` group that do not fit (up to
`reservations.RESERVE_DEPTH`, and none for which preemption holds room) gets the agents and the
earliest time they will have room for it, by the running sessions' expected ends and the
reservations made before it in the plan (booked on the plan's timeline). On each of those agents
the part of its need that will not have been released by then is held for it (`Hold` with
`until`, `reserved`): a later session of lower or equal priority takes it only if it declares a
`max_duration` that ends by then. Where nothing bounds the running sessions' ends, the agents with
the most room now are held with no end (`at` null): no session of lower or equal priority takes
their room until the reserved session has started.

The estimates: the waiting sessions in the sequencer's order, each booked where and when the
timeline first has room for it, so that each later session sees the room the ones ahead of it
will take, the reservations booked first; under `block`, none starts before the one blocking the
queue. A session that waits for a validator (quota, concurrency, dependencies) has none: what it
waits for is not room.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence

from sokovan.common.foresight import iso
from sokovan.common.slots import ResourceSlots
from sokovan.orchestrator.provisioner.snapshot import Estimate, Hold, Plan, Reservation, ScalingGroupSnapshot
from sokovan.orchestrator.provisioner.timeline import Timeline
from sokovan.state.session_reads import SessionWithKernels

# The waiting sessions of one group estimated per plan, in the sequencer's order: each costs a walk
# over the group's agents, and a queue deeper than this has no useful date that far back.
ESTIMATE_LIMIT = 200

UNBOUNDED = (
    "nothing bounds it: the sessions it waits for declare no max_duration and have no learned run time"
)


def reserve_for(session: SessionWithKernels, timeline: Timeline, plan: Plan) -> None:
    """Make `session`'s reservation (see the module's docstring), hold its room on its agents and
    book it in `timeline` (the plan's, which the next reservation reads)."""
    found = timeline.earliest(session)
    spread = session.cluster_mode == "multi-node" and len(session.kernels) > 1
    count = len(session.kernels) or session.cluster_size
    if found is not None:
        at: dt.datetime | None = found[0]
        agents = found[1]
    else:
        at, agents = None, _roomiest(timeline, session, count if spread else 1, count)
        if not agents:
            return  # no agent could ever hold it: its pending_reason says why
    for agent_id in dict.fromkeys(agents):
        n = agents.count(agent_id)
        need = session.resources.scaled(n)
        released, freed = timeline.releases_before(agent_id, at) if at is not None else (ResourceSlots(), 0)
        short = need - released
        held = ResourceSlots({k: v for k, v in short.items() if v > 0})
        hold = Hold(session.id, session.priority, held, max(0, n - freed), until=at, reserved=True)
        timeline.lines[agent_id].agent.held.append(hold)
    timeline.book(session, at or timeline.now, agents, for_ever=at is None)
    plan.reservations[session.id] = Reservation(session.id, agents, at)


def _roomiest(timeline: Timeline, session: SessionWithKernels, agents: int, kernels: int) -> tuple[str, ...]:
    """The agents that could ever hold `session` with the most room now (for a reservation whose
    time nothing bounds), one per kernel."""
    need = session.resources if agents > 1 else session.resources.scaled(kernels)
    fitting = [line.agent for line in timeline.usable(session) if need.fits_in(line.agent.available)]
    slot = next(iter(session.resources), "cpu")
    fitting.sort(key=lambda a: (-a.free.get(slot, 0), a.id))
    chosen = [a.id for a in fitting[:agents]]
    if len(chosen) < agents:
        return ()
    return tuple(chosen) if agents > 1 else (chosen[0],) * kernels


def estimate(snapshot: ScalingGroupSnapshot, plan: Plan) -> None:
    """Every waiting session's `Estimate` (see the module's docstring), written in `plan.estimates`."""
    timeline = Timeline.build(snapshot, plan.placed)
    for waiter in plan.waiters:  # the reservations first: their room is theirs whatever the order
        reserved = plan.reservations.get(waiter.session.id)
        if reserved is not None:
            timeline.book(
                waiter.session, reserved.at or timeline.now, reserved.agents, for_ever=reserved.at is None
            )
    nominated = set(snapshot.nominations) | {p.session_id for p in plan.preemptions}
    grace = dt.timedelta(seconds=snapshot.preemption.grace_period)
    starts: dict[uuid.UUID, dt.datetime | None] = {}
    done = 0
    for waiter in plan.waiters:
        session = waiter.session
        if session.id in plan.rejected or session.id not in plan.waiting:
            continue
        if not waiter.for_room:
            plan.estimates[session.id] = Estimate(
                None, f"not estimated: it waits for {plan.waiting[session.id]}"
            )
            continue
        if session.id in nominated:
            at = snapshot.now + grace
            plan.estimates[session.id] = Estimate(
                at, "room freed by the sessions it preempts, within their grace"
            )
            continue
        if done >= ESTIMATE_LIMIT:
            plan.estimates[session.id] = Estimate(
                None, f"not estimated: more than {ESTIMATE_LIMIT} sessions ahead of it wait for room"
            )
            continue
        done += 1
        reservation = plan.reservations.get(session.id)
        if reservation is not None:
            at_r = reservation.at
            starts[session.id] = at_r
            reason = (
                f"reserved: room held on {_agents(reservation.agents)} from {iso(at_r)}"
                if at_r is not None
                else f"reserved: room held on {_agents(reservation.agents)}; " + UNBOUNDED
            )
            plan.estimates[session.id] = Estimate(at_r, reason)
            continue
        not_before = None
        if waiter.behind is not None:
            if starts.get(waiter.behind, snapshot.now) is None:
                starts[session.id] = None
                plan.estimates[session.id] = Estimate(
                    None, "queued behind a session whose start nothing bounds"
                )
                continue
            not_before = starts.get(waiter.behind)
        found = timeline.earliest(session, not_before)
        if found is None:
            starts[session.id] = None
            plan.estimates[session.id] = Estimate(None, UNBOUNDED)
            continue
        at, agents = found
        timeline.book(session, at, agents)
        starts[session.id] = at
        plan.estimates[session.id] = Estimate(at, _why(at, agents, snapshot.now))


def _agents(agents: Sequence[str]) -> str:
    return ", ".join(dict.fromkeys(agents))


def _why(at: dt.datetime, agents: Sequence[str], now: dt.datetime) -> str:
    if at <= now:
        return f"room on {_agents(agents)} now"
    return (
        f"room on {_agents(agents)} once the sessions ahead of it there end (declared or learned run times)"
    )
