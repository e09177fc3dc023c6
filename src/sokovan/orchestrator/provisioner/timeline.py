"""The scheduler's picture of the future: when each agent will have room.

Built from the snapshot's occupants (live sessions' kernels with their expected ends) and the
placements of the plan being made, it answers "the earliest time this request fits on this agent
for this long". The `reserve` queue policy asks it for each of the first sessions that do not fit;
the start-time estimates ask it for every waiting session in the sequencer's order, booking each
answer so that the next session sees the room the ones ahead of it will take.

An occupant whose end nothing bounds (no `max_duration`, no learned run time) holds its room for
ever in this model: a request that only fits once it ends has no estimate (null), never a made-up
one. Room held for nominated preemptors is not free here either (`AgentSnapshot.room_for`).

Per request shape (the agents that may run its image, what one kernel needs, its priority), the
earliest times of the agents without bookings are kept as a heap of (time, agent, the agent's
version when computed). Such an agent's room only grows with time, so its earliest time does not
depend on how long the request runs; and whatever changes it later in the plan (a placement, a
booking) only takes room: its version is bumped, and its entry, never too late, is read again when
it comes to the top. The next session of a shape re-reads the agents that changed, not the
thousand others. Agents with bookings (a handful per plan) are read directly, as their answer also
depends on the run time. A caller that plans the same agents again and again keeps the heaps and
the agents' releases between plans in a `TimelineMemo` (the simulator; see its module).
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from sokovan.common.image_refs import offers
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus
from sokovan.orchestrator.provisioner.agent_line import AgentLine, Booking, Release, run_time
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, ScalingGroupSnapshot
from sokovan.orchestrator.provisioner.timeline_memo import Entry, SavedHeap, TimelineMemo
from sokovan.state.session_reads import SessionWithKernels

__all__ = ["AgentLine", "Timeline", "run_time"]


# a booked agent's heap entry: (earliest time, agent, (its version, its bookings) when computed)
_BookedEntry = tuple[dt.datetime, str, tuple[int, int]]


class _Lines(dict[str, AgentLine]):
    """The agents' lines, each made when first asked for."""

    def __init__(self, make: Callable[[str], AgentLine]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, agent_id: str) -> AgentLine:
        line = self[agent_id] = self._make(agent_id)
        return line


@dataclass
class Timeline:
    """The group's agents' room over time, as one plan sees it."""

    now: dt.datetime
    agents: dict[str, AgentSnapshot]
    learned: dict[tuple[str, str], float]
    memo: TimelineMemo | None = None
    lines: _Lines = field(init=False)
    _heaps: dict[tuple[object, ...], SavedHeap] = field(init=False)
    _versions: dict[str, int] = field(init=False)
    # The agents booked in this plan, and how many bookings each has. A booking lives for this plan
    # only: it leaves the agent's version (what a kept heap's entries are good for) alone; the
    # agent is read directly instead while it is booked.
    _booked: dict[str, AgentLine] = field(default_factory=dict)
    _booking: dict[str, int] = field(default_factory=dict)
    # per shape and run time: the booked agents' earliest times, and which agents are in it
    _booked_heaps: dict[tuple[object, ...], tuple[list[_BookedEntry], set[str]]] = field(default_factory=dict)
    # per shape and booked agent: whether it has room now, and at which (version, bookings)
    _room: dict[tuple[tuple[object, ...], str], tuple[tuple[int, int], bool]] = field(default_factory=dict)
    _usable: dict[str, tuple[tuple[str, ...], int, frozenset[str]]] = field(init=False)
    _extra: dict[str, list[Release]] = field(default_factory=dict)  # placed by this plan, not in the memo
    _read: set[tuple[object, ...]] = field(default_factory=set)  # heaps brought up to date this plan

    def __post_init__(self) -> None:
        self.lines = _Lines(self._make_line)
        memo = self.memo
        self._heaps = memo.heaps if memo is not None else {}
        self._versions = memo.versions if memo is not None else {}
        self._usable = memo.usable if memo is not None else {}

    @classmethod
    def build(
        cls, snapshot: ScalingGroupSnapshot, placed: Iterable[tuple[SessionWithKernels, Sequence[str]]]
    ) -> Timeline:
        """From the snapshot's occupants (or its memo's) and the sessions this plan placed (each
        with its agents)."""
        memo = snapshot.timeline_memo
        timeline = cls(snapshot.now, {a.id: a for a in snapshot.agents}, snapshot.learned, memo)
        if memo is None:
            for o in snapshot.occupants:
                if o.ends_at is not None and o.agent_id in timeline.agents:
                    timeline._extra.setdefault(o.agent_id, []).append((o.ends_at, o.slots, o.kernels))
        for session, agents in placed:
            timeline._placed(session, agents, changed=memo is not None)
        return timeline

    def _placed(self, session: SessionWithKernels, agents: Sequence[str], changed: bool) -> None:
        seconds = run_time(session, self.learned)
        ends = self.now + dt.timedelta(seconds=seconds) if seconds is not None else None
        for agent_id in dict.fromkeys(agents):
            if changed:  # its free room shrank since the memo last saw it
                self._bump(agent_id)
            if ends is None:
                continue
            count = list(agents).count(agent_id)
            release = (ends, session.resources.scaled(count), count)
            if agent_id in self.lines:
                line = self.lines[agent_id]
                line.releases.append(release)
                line.releases.sort(key=lambda r: r[0])
            else:
                self._extra.setdefault(agent_id, []).append(release)

    def _bump(self, agent_id: str) -> None:
        if self.memo is not None:
            self.memo.changed(agent_id)
        else:
            self._versions[agent_id] = self._versions.get(agent_id, 0) + 1

    def _make_line(self, agent_id: str) -> AgentLine:
        releases = self.memo.releases_of(agent_id) if self.memo is not None else []
        releases.extend(self._extra.pop(agent_id, ()))
        releases.sort(key=lambda r: r[0])
        return AgentLine(self.agents[agent_id], releases)

    def occupy(self, session: SessionWithKernels, agents: Sequence[str]) -> None:
        """`session` was placed on `agents` after this timeline was built: its room (already taken
        from the agents' free room) comes back at its expected end."""
        self._placed(session, agents, changed=True)

    def forget(self) -> None:
        """Room was given back outside the placed agents (a nominee's holds released): every
        agent is read again."""
        self._heaps.clear()
        self._read.clear()
        self._booked_heaps.clear()
        self._room.clear()

    def usable(self, session: SessionWithKernels) -> list[AgentLine]:
        return [self.lines[agent_id] for agent_id in self._usable_set(session.image)[0]]

    def _usable_set(self, image: str) -> tuple[tuple[str, ...], int, frozenset[str]]:
        known = self._usable.get(image)
        if known is None:
            ids = tuple(
                a.id
                for a in self.agents.values()
                if a.status == AgentStatus.READY and a.schedulable and offers(a.images, image)
            )
            tokens = {v[0]: v[1] for v in self._usable.values()}
            known = self._usable[image] = (ids, tokens.get(ids, len(tokens)), frozenset(ids))
        return known

    def earliest(
        self, session: SessionWithKernels, not_before: dt.datetime | None = None
    ) -> tuple[dt.datetime, tuple[str, ...]] | None:
        """When and where `session` could start (one agent per kernel), or None if nothing bounds it."""
        duration = run_time(session, self.learned)
        spread = session.cluster_mode == "multi-node" and len(session.kernels) > 1
        count = len(session.kernels) or session.cluster_size
        need = session.resources if spread else session.resources.scaled(count)
        if not_before is None:
            found = self._earliest_k(session, need, duration, count if spread else 1)
        else:
            start = max(self.now, not_before)
            found = []
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

    def _earliest_k(
        self, session: SessionWithKernels, need: ResourceSlots, duration: float | None, k: int
    ) -> list[tuple[dt.datetime, str]]:
        """The `k` agents where `need` fits earliest (for `duration`), with their times, earliest
        first (ties by agent id); fewer when fewer ever fit."""
        ids, token, members = self._usable_set(session.image)
        key = (token, tuple(sorted(need.items())), session.priority)
        saved = self._heaps.get(key)
        if saved is None:
            saved = self._heaps[key] = SavedHeap()
            self._read.add(key)
            self._refresh(saved, ids, session, need, duration, everyone=True)
        elif key not in self._read:  # kept from an earlier plan: the agents that changed since
            self._read.add(key)
            self._refresh(saved, ids, session, need, duration, everyone=False)
        saved.settle(self.now)
        found: list[Entry] = []
        aside: list[Entry] = []  # booked agents' entries: read directly below, kept for the next plan
        while len(found) < k and (saved.due or saved.entries):
            entry = saved.pop()
            _, agent_id, version = entry
            if agent_id in self._booked:
                aside.append(entry)
                continue
            current = self._versions.get(agent_id, 0)
            if version == current:
                found.append(entry)
            elif saved.fresh.get(agent_id) != current:  # its room shrank in this plan: read again
                saved.fresh[agent_id] = current
                again = self._line_earliest(self.lines[agent_id], session, need, duration)
                if again is not None:
                    saved.push((again, agent_id, current), self.now)
        for entry in found + aside:
            saved.push(entry, self.now)
        out = [(max(at, self.now), agent_id) for at, agent_id, _ in found]
        if self._booked:
            bar = out[k - 1] if len(out) >= k else None
            if bar is not None and bar[0] <= self.now:
                # only a booked agent with room now and an id before the bar's can come before it
                for agent_id, line in self._booked.items():
                    if agent_id < bar[1] and agent_id in members and self._room_now(key, line, session, need):
                        now_free, _ = line.agent.room_for(session.priority, session.id, reserved=False)
                        at_b = line.earliest(need, self.now, duration, now_free)
                        if at_b is not None:
                            out.append((at_b, agent_id))
            else:
                out += self._booked_k(key, members, session, need, duration, k)
        out.sort()
        return out[:k]

    def _booked_k(
        self,
        key: tuple[object, ...],
        members: frozenset[str],
        session: SessionWithKernels,
        need: ResourceSlots,
        duration: float | None,
        k: int,
    ) -> list[tuple[dt.datetime, str]]:
        """`_earliest_k` over the agents booked in this plan: their own heap per shape and run
        time, as lazy as the other (a booking only takes room), joined by each newly booked agent."""
        heap, included = self._booked_heaps.setdefault((key, duration), ([], set()))
        for agent_id, line in self._booked.items():
            if agent_id in included or agent_id not in members:
                continue
            included.add(agent_id)
            at = self._line_earliest(line, session, need, duration)
            if at is not None:
                heapq.heappush(heap, (at, agent_id, self._booked_version(agent_id)))
        found: list[_BookedEntry] = []
        while heap and len(found) < k:
            at, agent_id, version = heapq.heappop(heap)
            current = self._booked_version(agent_id)
            if version == current:
                found.append((at, agent_id, version))
                continue
            again = self._line_earliest(self._booked[agent_id], session, need, duration)
            if again is not None:
                heapq.heappush(heap, (again, agent_id, current))
        for entry in found:
            heapq.heappush(heap, entry)
        return [(at, agent_id) for at, agent_id, _ in found]

    def _room_now(
        self, key: tuple[object, ...], line: AgentLine, session: SessionWithKernels, need: ResourceSlots
    ) -> bool:
        """Whether `need` fits on the booked `line` now, remembered per shape until the agent
        changes (a booking, a placement)."""
        agent_id = line.agent.id
        version = self._booked_version(agent_id)
        known = self._room.get((key, agent_id))
        if known is not None and known[0] == version:
            return known[1]
        now_free, _ = line.agent.room_for(session.priority, session.id, reserved=False)
        room = line.room_at_first(need, self.now, now_free)
        self._room[(key, agent_id)] = (version, room)
        return room

    def _booked_version(self, agent_id: str) -> tuple[int, int]:
        return self._versions.get(agent_id, 0), self._booking.get(agent_id, 0)

    def _refresh(
        self,
        saved: SavedHeap,
        ids: Sequence[str],
        session: SessionWithKernels,
        need: ResourceSlots,
        duration: float | None,
        everyone: bool,
    ) -> None:
        """Compute the entries of the agents whose version moved since their newest entry (all of
        them for a new heap); their older entries are dropped when they come to the top."""
        fresh, versions = saved.fresh, self._versions
        pushed: list[Entry] = []
        if not everyone and self.memo is not None:  # the agents changed since, in the memo's log
            members = self._usable_set(session.image)[2]
            ids = [a for a in dict.fromkeys([*saved.deferred, *self.memo.log[saved.seen :]]) if a in members]
            saved.deferred.clear()
        if self.memo is not None:
            saved.seen = len(self.memo.log)
        for agent_id in ids:
            current = versions.get(agent_id, 0)
            if not everyone and fresh.get(agent_id) == current:
                continue
            if agent_id in self._booked:
                saved.deferred.add(agent_id)  # read directly in this plan; its entry in the next
                continue
            fresh[agent_id] = current
            at = self._line_earliest(self.lines[agent_id], session, need, duration)
            if at is not None:
                pushed.append((at, agent_id, current))
        # rebuilt, without the stale entries, when they outnumber the live ones
        if everyone or saved.size() + len(pushed) > 3 * len(self._usable_set(session.image)[0]) + 256:
            saved.rebuild(pushed, versions, self.now)
        else:
            for entry in pushed:
                saved.push(entry, self.now)

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
            line = self.lines[agent_id]
            line.bookings.append(Booking(at, end, session.resources.scaled(count), count))
            self._booking[agent_id] = self._booking.get(agent_id, 0) + 1
            self._booked[agent_id] = line

    def releases_before(self, agent_id: str, at: dt.datetime) -> tuple[ResourceSlots, int]:
        return self.lines[agent_id].released_by(at)
