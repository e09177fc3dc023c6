"""The simulated cluster's state, kept incrementally between cycles: what the manager's loader
reads from the database at each cycle (`provisioner.loader`, `provisioner.foresight_reads`,
`state.fair_share_usage`), here updated as sessions start and end instead of read again.

- the agents (`AgentSnapshot`, READY and schedulable): their capacity, what their live kernels
  occupy and how many; one object per agent for the whole run, so that a cycle does not rebuild a
  thousand of them. Placement charges them itself (`AgentSnapshot.take`); an end gives back here.
- `Tenancy` (shared by the groups, as quotas are cluster-wide; no quotas unless the trace has them,
  and the format has none yet): usage per keypair, project and domain, active sessions, and the
  (status, result) of the sessions others depend on.
- per group: each user's allocation (DRF), the round-robin cursor, and the occupants (each live
  session's kernels per agent with its expected end: start + `max_duration`, else + the learned run
  time, else none).
- the learned run times: per (access key, image), the median run time of the sessions of that pair
  that ended normally so far in the simulation (`SimSession.learns`), taken again at most every
  `LEARNED_KEEP` seconds of virtual time, as the manager's processes keep what they read
  (`foresight_reads`); `refresh` does it before each cycle's plans.
- the usage intervals the fair-share view is computed from (`fair_share_input`).
"""

from __future__ import annotations

import bisect
import datetime as dt
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from sokovan.common.fair_share import UsageInterval
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus, SessionStatus
from sokovan.orchestrator.provisioner.foresight_reads import LEARNED_KEEP
from sokovan.orchestrator.provisioner.snapshot import NOTHING, AgentSnapshot, Occupant, Tenancy
from sokovan.orchestrator.provisioner.stages import Selector
from sokovan.orchestrator.provisioner.timeline_memo import TimelineMemo
from sokovan.sim.sessions import SimSession
from sokovan.sim.trace import Trace, TraceGroup

_ZERO = Decimal(0)


@dataclass
class GroupState:
    trace: TraceGroup
    agents: list[AgentSnapshot]
    by_id: dict[str, AgentSnapshot]
    pending: dict[uuid.UUID, SimSession] = field(default_factory=dict)  # in arrival order
    user_allocated: dict[uuid.UUID, ResourceSlots] = field(default_factory=lambda: defaultdict(ResourceSlots))
    roundrobin_cursor: str | None = None
    # the selector of the group's provisioner, kept between cycles (`engine`), or None
    selector: Selector | None = None
    changed: bool = True  # something happened since its last plan
    capacity: ResourceSlots = field(default_factory=ResourceSlots)  # its agents' (they never change)
    # the occupants, one list kept in place (a cycle reads it as it is: no copy of thousands);
    # each live session's entries by their index in it
    occupants: list[Occupant] = field(default_factory=list)
    _at: dict[uuid.UUID, list[int]] = field(default_factory=dict)
    # the same occupants per agent, and what the group's timelines keep between plans (told of
    # every agent whose room or occupants change)
    by_agent: dict[str, dict[uuid.UUID, Occupant]] = field(default_factory=lambda: defaultdict(dict))
    memo: TimelineMemo = field(init=False)

    def __post_init__(self) -> None:
        self.memo = TimelineMemo(lambda agent_id: self.by_agent[agent_id].values())

    def occupy(self, session_id: uuid.UUID, occupants: list[Occupant]) -> None:
        """Add, or replace (same agents), a live session's occupants."""
        for o in occupants:
            self.by_agent[o.agent_id][session_id] = o
            self.memo.changed(o.agent_id)
        places = self._at.get(session_id)
        if places is None:
            start = len(self.occupants)
            self.occupants.extend(occupants)
            self._at[session_id] = list(range(start, start + len(occupants)))
            return
        for i, o in zip(places, occupants, strict=True):
            self.occupants[i] = o

    def vacate(self, session_id: uuid.UUID) -> None:
        """Remove a session's occupants: each place takes the list's last entry (order does not
        matter to the timeline, which sorts by end)."""
        for i in sorted(self._at.pop(session_id), reverse=True):
            gone = self.occupants[i]
            self.by_agent[gone.agent_id].pop(session_id, None)
            self.memo.changed(gone.agent_id)
            last = self.occupants.pop()
            if i < len(self.occupants):
                self.occupants[i] = last
                moved = self._at[last.session_id]
                moved[moved.index(len(self.occupants))] = i


@dataclass
class Running:
    """A session started in the simulation: when, on which agents (one per kernel), and its
    per-agent share (slots, kernels)."""

    sim: SimSession
    start: dt.datetime
    agents: tuple[str, ...]
    per_agent: dict[str, tuple[ResourceSlots, int]]


class SimCluster:
    def __init__(self, trace: Trace) -> None:
        self.groups: dict[str, GroupState] = {}
        shapes: dict[tuple[tuple[str, Decimal], ...], ResourceSlots] = {}
        images: dict[tuple[str, ...], frozenset[str]] = {}
        by_group: dict[str, list[AgentSnapshot]] = defaultdict(list)
        for a in sorted(trace.agents, key=lambda a: a.id):
            # Agents of one shape share their capacity object, as the loader's statics do (the
            # selectors' index looks at each distinct object once).
            capacity = shapes.setdefault(tuple(sorted(a.available.items())), a.available)
            offered = images.setdefault(tuple(sorted(a.images)), frozenset(a.images))
            by_group[a.scaling_group].append(
                AgentSnapshot(a.id, AgentStatus.READY, True, capacity, NOTHING, 0, a.max_kernels, offered)
            )
        for g in trace.groups:
            agents = by_group.get(g.name, [])
            capacity = ResourceSlots.total(a.available for a in agents)
            self.groups[g.name] = GroupState(g, agents, {a.id: a for a in agents}, capacity=capacity)
        self.capacity = ResourceSlots.total(a.available for g in self.groups.values() for a in g.agents)
        self.tenancy = Tenancy()
        self.learned: dict[tuple[str, str], float] = {}
        self._runs: dict[tuple[str, str], list[float]] = defaultdict(list)
        self._unbounded: dict[tuple[str, str], set[uuid.UUID]] = defaultdict(set)
        self._stale: dict[tuple[str, str], None] = {}  # pairs with runs not yet in `learned`, in order
        self._taken_at: dict[tuple[str, str], dt.datetime] = {}  # when each pair's median was taken
        self.running: dict[uuid.UUID, Running] = {}
        self.intervals: dict[uuid.UUID, UsageInterval] = {}  # fair share: the live runs
        self.ended_runs: list[UsageInterval] = []  # ended since the fair-share view last took them
        self.started_runs: list[UsageInterval] = []  # started since the fair-share view last took them
        # what the cluster's live kernels hold, per slot (for utilization)
        self.used: dict[str, Decimal] = {}
        self.depended = {d for s in trace.sessions for d in s.depends_on}

    def note(self, sim: SimSession, status: str, result: str | None = None) -> None:
        """The (status, result) a session depending on `sim` sees."""
        if sim.trace.id in self.depended:
            self.tenancy.dependencies[sim.spec.id] = (status, result)
            for g in self.groups.values():
                g.changed = True

    def arrive(self, sim: SimSession) -> None:
        group = self.groups[sim.spec.scaling_group]
        group.pending[sim.spec.id] = sim
        group.changed = True
        self.note(sim, SessionStatus.PENDING.value)

    def withdraw(self, sim: SimSession) -> bool:
        """A session cancelled while pending in the trace leaves, if still waiting."""
        group = self.groups[sim.spec.scaling_group]
        if group.pending.pop(sim.spec.id, None) is None:
            return False
        self.note(sim, SessionStatus.CANCELLED.value, sim.trace.result)
        return True

    def started(self, sim: SimSession, agents: tuple[str, ...], now: dt.datetime) -> Running:
        """`sim` was placed on `agents` at `now`: the plan has charged the agents, the tenancy and
        the user's allocation already; what is left is what the loader would read next cycle."""
        group = self.groups[sim.spec.scaling_group]
        group.pending.pop(sim.spec.id, None)
        counts: dict[str, int] = defaultdict(int)
        for agent_id in agents:
            counts[agent_id] += 1
        per_agent = {a: (sim.spec.resources.scaled(n), n) for a, n in counts.items()}
        run = Running(sim, now, agents, per_agent)
        self.running[sim.spec.id] = run
        if sim.spec.max_duration is None:
            self._unbounded[sim.pair].add(sim.spec.id)
        group.occupy(sim.spec.id, self._occupants(run))
        self._hold(sim.spec.requested_slots, 1)
        s = sim.spec
        # as floats: the view converts every amount at every build, and a Decimal's conversion
        # costs more than the rest of it
        slots = {k: float(v) for k, v in s.requested_slots.items()}
        interval = UsageInterval(s.domain_name, str(s.project_id), str(s.user_id), slots, now)
        self.intervals[s.id] = interval
        self.started_runs.append(interval)
        self.note(sim, SessionStatus.RUNNING.value)
        return run

    def ended(self, sim: SimSession, now: dt.datetime) -> Running:
        """`sim` ended at `now`: its room, usage and allocation are given back."""
        run = self.running.pop(sim.spec.id)
        group = self.groups[sim.spec.scaling_group]
        for agent_id, (slots, n) in run.per_agent.items():
            agent = group.by_id[agent_id]
            occupied = agent.occupied - slots
            if all(v <= 0 for v in occupied.values()):
                agent.occupied, agent.free = NOTHING, agent.available
            else:
                agent.occupied, agent.free = occupied, agent.available - occupied
            agent.kernel_count -= n
            if group.selector is not None:
                group.selector.taken(agent)  # its room changed: re-keyed in the selector's index
        s, t = sim.spec, self.tenancy
        request = s.requested_slots
        t.keypair_usage[s.access_key] = t.keypair_usage[s.access_key] - request
        t.project_usage[s.project_id] = t.project_usage[s.project_id] - request
        t.domain_usage[s.domain_name] = t.domain_usage[s.domain_name] - request
        t.active_sessions[s.access_key] -= 1
        group.user_allocated[s.user_id] = group.user_allocated[s.user_id] - request
        group.vacate(s.id)
        group.changed = True
        self._hold(request, -1)
        self._unbounded[sim.pair].discard(s.id)
        iv = self.intervals.pop(s.id)
        self.ended_runs.append(UsageInterval(iv.domain, iv.project, iv.user, iv.slots, iv.start, now))
        if sim.learns:
            bisect.insort(self._runs[sim.pair], (now - run.start).total_seconds())
            self._stale[sim.pair] = None
        self.note(sim, *sim.end_state())
        return run

    def _hold(self, slots: ResourceSlots, sign: int) -> None:
        for name, amount in slots.items():
            self.used[name] = self.used.get(name, _ZERO) + sign * amount

    def _occupants(self, run: Running) -> list[Occupant]:
        s = run.sim.spec
        seconds = float(s.max_duration) if s.max_duration is not None else self.learned.get(run.sim.pair)
        ends = run.start + dt.timedelta(seconds=seconds) if seconds is not None else None
        return [Occupant(s.id, a, slots, n, ends) for a, (slots, n) in run.per_agent.items()]

    def refresh(self, now: dt.datetime) -> None:
        """Take again the learned run times that are due (see the module's docstring)."""
        for pair in list(self._stale):
            taken = self._taken_at.get(pair)
            if taken is not None and (now - taken).total_seconds() < LEARNED_KEEP:
                continue
            del self._stale[pair]
            self._taken_at[pair] = now
            runs = self._runs[pair]
            mid = len(runs) // 2  # the median, as percentile_cont(0.5) takes it
            self.learned[pair] = runs[mid] if len(runs) % 2 else (runs[mid - 1] + runs[mid]) / 2
            for sid in self._unbounded[pair]:  # their expected ends move with the learned time
                run = self.running[sid]
                self.groups[run.sim.spec.scaling_group].occupy(sid, self._occupants(run))

    def live_intervals(self) -> Iterable[UsageInterval]:
        return self.intervals.values()

    def take_started(self) -> list[UsageInterval]:
        """The runs started since the last call (the fair-share view adds them once)."""
        started, self.started_runs = self.started_runs, []
        return started

    def take_ended(self) -> list[UsageInterval]:
        """The runs ended since the last call (the fair-share view sums them once, `fair_share_input`)."""
        ended, self.ended_runs = self.ended_runs, []
        return ended
