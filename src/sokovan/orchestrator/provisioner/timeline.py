"""The scheduler's picture of the future: when each agent will have room.

Built from the snapshot's occupants (live sessions' kernels with their expected ends) and the
placements of the plan being made, it answers "the earliest time this request fits on this agent
for this long". The `reserve` queue policy asks it once per plan, for the first session that does
not fit; the start-time estimates ask it for every waiting session in the sequencer's order,
booking each answer so that the next session sees the room the ones ahead of it will take.

An occupant whose end nothing bounds (no `max_duration`, no learned run time) holds its room for
ever in this model: a request that only fits once it ends has no estimate (null), never a made-up
one. Room held for nominated preemptors is not free here either (`AgentSnapshot.room_for`).
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from sokovan.common.image_refs import offers
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, Occupant, ScalingGroupSnapshot
from sokovan.state.session_reads import SessionWithKernels

_ZERO = Decimal(0)


def run_time(session: SessionWithKernels, learned: dict[tuple[str, str], float]) -> float | None:
    """How long `session` is expected to run: its declared `max_duration`, else the learned run
    time of its owner's sessions of the same image, else None."""
    if session.max_duration is not None:
        return float(session.max_duration)
    return learned.get((session.access_key, session.image))


@dataclass(slots=True)
class _Booking:
    start: dt.datetime
    end: dt.datetime | None
    slots: ResourceSlots
    kernels: int


@dataclass(slots=True)
class AgentLine:
    """One agent's room over time: free now, released at each known end, taken by bookings."""

    agent: AgentSnapshot
    # (end, slots, kernels) of the occupants whose end is known, earliest first once sorted
    releases: list[tuple[dt.datetime, ResourceSlots, int]] = field(default_factory=list)
    bookings: list[_Booking] = field(default_factory=list)

    def free_at(self, at: dt.datetime, now_free: ResourceSlots) -> ResourceSlots:
        free = now_free
        for end, slots, _ in self.releases:
            if end > at:
                break
            free = free + slots
        for b in self.bookings:
            if b.start <= at and (b.end is None or at < b.end):
                free = free - b.slots
        return free

    def released_by(self, at: dt.datetime) -> tuple[ResourceSlots, int]:
        slots, kernels = ResourceSlots(), 0
        for end, held, count in self.releases:
            if end > at:
                break
            slots, kernels = slots + held, kernels + count
        return slots, kernels

    def earliest(
        self,
        need: ResourceSlots,
        now: dt.datetime,
        duration: float | None,
        now_free: ResourceSlots,
    ) -> dt.datetime | None:
        """The first time from `now` at which `need` fits here and stays fitting for `duration`
        seconds (for ever when None); None when no known end makes room."""
        if not need.fits_in(self.agent.available):
            return None
        if not self.releases and not self.bookings:  # the common case: room now or never
            return now if need.fits_in(now_free) else None
        if not self.bookings:  # room only grows: the first time it fits, it stays fitting
            short = {k: v - now_free.get(k, _ZERO) for k, v in need.items() if v > 0}
            short = {k: v for k, v in short.items() if v > 0}
            if not short:
                return now
            for end, slots, _ in self.releases:  # only the short slots are counted down
                for k in list(short):
                    left = short[k] - slots.get(k, _ZERO)
                    if left > 0:
                        short[k] = left
                    else:
                        del short[k]
                if not short:
                    return max(end, now)
            return None
        times = {now}
        times.update(end for end, _, _ in self.releases if end > now)
        times.update(b.end for b in self.bookings if b.end is not None and b.end > now)
        starts = sorted(b.start for b in self.bookings if b.start > now)
        for t in sorted(times):
            if not need.fits_in(self.free_at(t, now_free)):
                continue
            until = None if duration is None else t + dt.timedelta(seconds=duration)
            if all(
                need.fits_in(self.free_at(s, now_free))
                for s in starts
                if s > t and (until is None or s < until)
            ):
                return t
        return None


@dataclass
class Timeline:
    """The group's agents' room over time, as one plan sees it."""

    now: dt.datetime
    lines: dict[str, AgentLine]
    learned: dict[tuple[str, str], float]
    # Per request shape, the agents' earliest times as a heap (time, agent, the agent's version
    # when computed): a booking bumps only its agents' versions, so the next session of the same
    # shape re-reads those agents, not the thousand others (a booking only ever takes room).
    _heaps: dict[tuple[object, ...], list[tuple[dt.datetime, str, int]]] = field(default_factory=dict)
    _versions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(
        cls, snapshot: ScalingGroupSnapshot, placed: Iterable[tuple[SessionWithKernels, Sequence[str]]]
    ) -> Timeline:
        """From the snapshot's occupants and the sessions this plan placed (each with its agents)."""
        lines = {a.id: AgentLine(a) for a in snapshot.agents}
        occupants: list[Occupant] = list(snapshot.occupants)
        for session, agents in placed:
            seconds = run_time(session, snapshot.learned)
            ends = snapshot.now + dt.timedelta(seconds=seconds) if seconds is not None else None
            per_agent: dict[str, int] = defaultdict(int)
            for agent_id in agents:
                per_agent[agent_id] += 1
            for agent_id, count in per_agent.items():
                occupants.append(Occupant(session.id, agent_id, session.resources.scaled(count), count, ends))
        for o in occupants:
            line = lines.get(o.agent_id)
            if line is not None and o.ends_at is not None:
                line.releases.append((max(o.ends_at, snapshot.now), o.slots, o.kernels))
        for line in lines.values():
            line.releases.sort(key=lambda r: r[0])
        return cls(snapshot.now, lines, snapshot.learned)

    def occupy(self, session: SessionWithKernels, agents: Sequence[str]) -> None:
        """`session` was placed on `agents` after this timeline was built: its room (already taken
        from the agents' free room) comes back at its expected end."""
        seconds = run_time(session, self.learned)
        if seconds is None:
            return
        ends = self.now + dt.timedelta(seconds=seconds)
        for agent_id in dict.fromkeys(agents):
            count = list(agents).count(agent_id)
            line = self.lines[agent_id]
            line.releases.append((ends, session.resources.scaled(count), count))
            line.releases.sort(key=lambda r: r[0])
        self._heaps.clear()

    def usable(self, session: SessionWithKernels) -> list[AgentLine]:
        image = session.image
        return [
            line
            for line in self.lines.values()
            if line.agent.status == AgentStatus.READY
            and line.agent.schedulable
            and offers(line.agent.images, image)
        ]

    def earliest(
        self, session: SessionWithKernels, not_before: dt.datetime | None = None
    ) -> tuple[dt.datetime, tuple[str, ...]] | None:
        """When and where `session` could start (one agent per kernel), or None if nothing bounds it."""
        duration = run_time(session, self.learned)
        spread = session.cluster_mode == "multi-node" and len(session.kernels) > 1
        count = len(session.kernels) or session.cluster_size
        need = session.resources if spread else session.resources.scaled(count)
        start = max(self.now, not_before) if not_before is not None else self.now
        if not spread and not_before is None:
            return self._earliest_one(session, need, duration, count)
        found: list[tuple[dt.datetime, str]] = []
        for line in self.usable(session):
            now_free, _ = line.agent.room_for(session.priority, session.id, reserved=False)
            at = line.earliest(need, start, duration, now_free)
            if at is not None:
                found.append((at, line.agent.id))
        found.sort()
        if spread:
            if len(found) < count:
                return None
            chosen = found[:count]
            return chosen[-1][0], tuple(agent for _, agent in chosen)
        if not found:
            return None
        return found[0][0], (found[0][1],) * count

    def _earliest_one(
        self, session: SessionWithKernels, need: ResourceSlots, duration: float | None, count: int
    ) -> tuple[dt.datetime, tuple[str, ...]] | None:
        key = (session.image, tuple(sorted(need.items())), duration, session.priority)
        heap = self._heaps.get(key)
        if heap is None:
            heap = []
            for line in self.usable(session):
                at = self._line_earliest(line, session, need, duration)
                if at is not None:
                    heap.append((at, line.agent.id, self._versions.get(line.agent.id, 0)))
            heapq.heapify(heap)
            self._heaps[key] = heap
        while heap:
            at, agent_id, version = heap[0]
            current = self._versions.get(agent_id, 0)
            if version == current:
                return at, (agent_id,) * count
            heapq.heappop(heap)
            again = self._line_earliest(self.lines[agent_id], session, need, duration)
            if again is not None:
                heapq.heappush(heap, (again, agent_id, current))
        return None

    def _line_earliest(
        self, line: AgentLine, session: SessionWithKernels, need: ResourceSlots, duration: float | None
    ) -> dt.datetime | None:
        now_free, _ = line.agent.room_for(session.priority, session.id, reserved=False)
        return line.earliest(need, self.now, duration, now_free)

    def book(
        self, session: SessionWithKernels, at: dt.datetime, agents: Sequence[str], for_ever: bool = False
    ) -> None:
        """`session` takes its room on `agents` from `at` for its run time (for ever if unknown)."""
        duration = None if for_ever else run_time(session, self.learned)
        end = at + dt.timedelta(seconds=duration) if duration is not None else None
        per_agent: dict[str, int] = defaultdict(int)
        for agent_id in agents:
            per_agent[agent_id] += 1
        for agent_id, count in per_agent.items():
            self.lines[agent_id].bookings.append(_Booking(at, end, session.resources.scaled(count), count))
            self._versions[agent_id] = self._versions.get(agent_id, 0) + 1

    def releases_before(self, agent_id: str, at: dt.datetime) -> tuple[ResourceSlots, int]:
        return self.lines[agent_id].released_by(at)
