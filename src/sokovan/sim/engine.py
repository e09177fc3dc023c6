"""The virtual clock: a trace replayed through the real provisioner, event by event.

Events are arrivals (at `created_at`), ends (at start + the session's run time, `sessions`) and
withdrawals (a session cancelled while pending in the trace leaves at its `terminated_at`). All
events of one instant are applied together (ends, then withdrawals, then arrivals), then every
scaling group in which something happened and that has waiting sessions is planned once, as the
manager's placement lane does when an event hints it: `build.provisioner_for` on a
`ScalingGroupSnapshot` whose scheduler, queue policy and selector are the combination's, over the
state `cluster.SimCluster` keeps, with `now` the virtual time. A group in which nothing happened
is not planned again: the same state gives the same plan. A plan's placements start at once (the
simulation has no image pulls or start-up time) and end after their run time; its rejections
leave.

The group's selector is kept from one cycle to the next, told of every agent whose room changed
(`Selector.taken`, as the plan itself tells it of the agents it fills), so that its index over a
thousand agents is not rebuilt at every cycle; `reuse_selector=False` builds a new one per cycle
(the tests compare both). Room held by a reservation lives for one plan, as in the manager, where
each cycle reads its snapshot afresh. Start-time estimates are not computed: they change no
placement.

Nor are the reasons a session waits: when no agent fits a session, the pipeline walks every agent
once more to count why each refused it (for its pending_reason), which was nine tenths of a
simulation's time; only that text depends on it, never a decision. A run plans with the
provisioner's `explain` off (the tests check that the placements are the same either way;
`explain=True` keeps it).

Under `reserve`, each group keeps its timeline's memo between plans (`GroupState.memo`: the
agents' releases and the heaps of their earliest times, re-read only for the agents that changed;
`reuse_timeline=False` starts each plan afresh), and a plan makes its reservations lazily, only
while a later session could still be placed with their holds (`provisioner.reservations`;
`lazy_reservations=False` makes each at once). The tests compare both ways.
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from sokovan.common.fair_share import FairShareView
from sokovan.common.slots import ResourceSlots
from sokovan.orchestrator.provisioner.build import provisioner_for
from sokovan.orchestrator.provisioner.snapshot import Plan, ScalingGroupSnapshot
from sokovan.sim.cluster import GroupState, Running, SimCluster
from sokovan.sim.fair_share_input import FairShareInput
from sokovan.sim.sessions import SimSession, sim_sessions
from sokovan.sim.trace import Trace

# event kinds, in the order they are applied within one instant
END, WITHDRAW, ARRIVE = 0, 1, 2


@dataclass(frozen=True)
class Combination:
    """The policies one run uses in every scaling group; None: each group's own from the trace."""

    policy: str
    queue_policy: str | None = None
    selector: str | None = None


@dataclass
class Outcome:
    """What one run did: its starts in order, who never started, and the cluster's use over time."""

    combination: Combination
    trace: Trace
    sessions: list[SimSession]
    starts: list[Running] = field(default_factory=list)
    rejected: dict[uuid.UUID, str] = field(default_factory=dict)
    withdrawn: set[uuid.UUID] = field(default_factory=set)
    # (time, {slot: amount in use}) after each instant that changed it
    usage: list[tuple[dt.datetime, dict[str, float]]] = field(default_factory=list)
    capacity: dict[str, float] = field(default_factory=dict)
    end: dt.datetime | None = None  # the last event
    cycles: int = 0  # plans made


@dataclass
class _Snapshot(ScalingGroupSnapshot):
    """A group's snapshot whose capacity (what DRF divides by: the sum over its agents, summed
    again at every cycle by the base class) is the simulation's, whose agents never change."""

    fixed_capacity: ResourceSlots = field(default_factory=ResourceSlots)

    @property
    def capacity(self) -> ResourceSlots:
        return self.fixed_capacity


class Simulation:
    def __init__(
        self,
        trace: Trace,
        combination: Combination,
        seed: int = 0,
        reuse_selector: bool = True,
        explain: bool = False,
        reuse_timeline: bool = True,
        lazy_reservations: bool = True,
    ):
        self.trace = trace
        self.combination = combination
        self.reuse_selector = reuse_selector
        self.reuse_timeline = reuse_timeline
        self.lazy_reservations = lazy_reservations
        self.explain = explain
        self.sessions = sim_sessions(trace, seed)
        self.cluster = SimCluster(trace)
        self.fair_share = FairShareInput(trace)
        self._events: list[tuple[dt.datetime, int, int, SimSession]] = []

    def _push(self, at: dt.datetime, kind: int, sim: SimSession) -> None:
        heapq.heappush(self._events, (at, kind, sim.order, sim))

    def run(self, progress: Callable[[int], None] | None = None) -> Outcome:
        return self._run(progress)

    def _run(self, progress: Callable[[int], None] | None) -> Outcome:
        out = Outcome(self.combination, self.trace, self.sessions)
        out.capacity = {k: float(v) for k, v in self.cluster.capacity.items() if v > 0}
        for sim in self.sessions:
            self._push(sim.trace.created_at, ARRIVE, sim)
            if sim.withdraw_at is not None:
                self._push(max(sim.withdraw_at, sim.trace.created_at), WITHDRAW, sim)
        handlers = {END: self._end, WITHDRAW: self._withdraw, ARRIVE: self._arrive}
        while self._events:
            now = self._events[0][0]
            while self._events and self._events[0][0] == now:
                _, kind, _, sim = heapq.heappop(self._events)
                handlers[kind](sim, now, out)
            self._cycle(now, out)
            out.usage.append((now, {k: float(v) for k, v in self.cluster.used.items()}))
            out.end = now
            if progress is not None:
                progress(len(out.starts))
        return out

    def _arrive(self, sim: SimSession, now: dt.datetime, out: Outcome) -> None:
        self.cluster.arrive(sim)

    def _withdraw(self, sim: SimSession, now: dt.datetime, out: Outcome) -> None:
        if self.cluster.withdraw(sim):
            out.withdrawn.add(sim.spec.id)

    def _end(self, sim: SimSession, now: dt.datetime, out: Outcome) -> None:
        self.cluster.ended(sim, now)

    def _cycle(self, now: dt.datetime, out: Outcome) -> None:
        groups = [g for g in self.cluster.groups.values() if g.changed and g.pending]
        if not groups:
            return
        self.cluster.refresh(now)
        view = None
        if self.combination.policy == "fair_share":  # as the loader, only for a group that uses it
            view = self.fair_share.view(self.cluster, self._pending_owners, now)
        for group in groups:
            group.changed = False
            plan = self._plan(group, now, view)
            out.cycles += 1
            self._apply(group, plan, now, out)

    def _pending_owners(self) -> list[tuple[str, str, str]]:
        return [
            (s.spec.domain_name, str(s.spec.project_id), str(s.spec.user_id))
            for g in self.cluster.groups.values()
            for s in g.pending.values()
        ]

    def _plan(self, group: GroupState, now: dt.datetime, view: FairShareView | None) -> Plan:
        c, g = self.combination, group.trace
        snapshot = _Snapshot(
            name=g.name,
            scheduler=c.policy,
            agent_selection=c.selector or g.agent_selection,
            agents=group.agents,
            queue_policy=c.queue_policy or g.queue_policy,
            resource_priority=tuple(g.resource_priority),
            allowed_session_types=frozenset(g.allowed_session_types),
            roundrobin_cursor=group.roundrobin_cursor,
            tenancy=self.cluster.tenancy,
            user_allocated=group.user_allocated,
            now=now,
            occupants=group.occupants,
            learned=self.cluster.learned,
            fair_share=view,
            fixed_capacity=group.capacity,
            timeline_memo=group.memo if self.reuse_timeline else None,
        )
        provisioner = provisioner_for(snapshot)
        provisioner.estimate = False
        provisioner.explain = self.explain
        provisioner.reservations.lazy = self.lazy_reservations
        if self.reuse_selector:
            if group.selector is None:
                group.selector = provisioner.selector
            else:
                provisioner.selector = group.selector
        return provisioner.plan([s.spec for s in group.pending.values()], snapshot)

    def _apply(self, group: GroupState, plan: Plan, now: dt.datetime, out: Outcome) -> None:
        for placement in plan.placements:
            sim = group.pending[placement.session_id]
            agents = tuple(placement.kernels[k.id] for k in sim.spec.kernels)
            out.starts.append(self.cluster.started(sim, agents, now))
            if math.isfinite(sim.run):
                self._push(now + dt.timedelta(seconds=sim.run), END, sim)
        for sid, (cause, message) in plan.rejected.items():
            sim = group.pending.pop(sid)
            out.rejected[sid] = f"{cause}: {message}"
            self.cluster.note(sim, "CANCELLED", "FAILURE")
        for reservation in plan.reservations.values():  # held for this plan only
            for agent_id in reservation.agents:
                group.by_id[agent_id].held = []
        group.roundrobin_cursor = plan.roundrobin_cursor


def simulate(
    trace: Trace,
    combination: Combination,
    seed: int = 0,
    *,
    reuse_selector: bool = True,
    explain: bool = False,
    reuse_timeline: bool = True,
    lazy_reservations: bool = True,
) -> Outcome:
    return Simulation(
        trace, combination, seed, reuse_selector, explain, reuse_timeline, lazy_reservations
    ).run()
