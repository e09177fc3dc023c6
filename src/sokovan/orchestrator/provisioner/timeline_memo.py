"""What a caller that plans the same agents cycle after cycle keeps between plans, so that each
plan's timeline (`timeline.Timeline`) reads again only the agents that changed.

The simulator keeps one per scaling group (`sim.cluster`): thousands of plans over a thousand
agents, of which a handful change between two plans. The manager keeps none: each of its cycles
reads its snapshot afresh, and its timeline is built from that snapshot alone.

The owner bumps an agent's version (`changed`) whenever its free room or its live sessions'
kernels change; a timeline bumps it too for what its own plan does there (a placement, a
booking). What is kept under a version is good while the version stands:

- each agent's releases (its live sessions' expected ends), read through `occupants_of`;
- per request shape, the heap of the agents' earliest times (`SavedHeap`), with the version each
  agent's newest entry was computed at: the next plan recomputes the agents whose version moved
  (their room may have grown) and takes the others as they are;
- per image, the agents that may run it.

It assumes what the simulator's agents do: their status, schedulability and images never change,
and the only room held on them is reservations' (which the timeline books, not holds).
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sokovan.orchestrator.provisioner.agent_line import Release
    from sokovan.orchestrator.provisioner.snapshot import Occupant

# a heap entry: (earliest time, agent, the agent's version when computed)
Entry = tuple[dt.datetime, str, int]


@dataclass
class SavedHeap:
    """One request shape's agents by their earliest time, ties by agent id. An agent whose time
    has come (at or before `now`: room now, or a live session past its expected end) ranks as
    `now`, so those are kept apart in `due`, by agent id alone; `entries` holds the others by
    (time, agent). Entries go stale (their agent's version moved) and are dropped by the reader."""

    entries: list[Entry] = field(default_factory=list)
    due: list[tuple[str, dt.datetime, int]] = field(default_factory=list)
    # per agent: the version its newest entry was computed at (also when it had no time: none pushed)
    fresh: dict[str, int] = field(default_factory=dict)
    seen: int = 0  # how much of the memo's log it has read
    deferred: set[str] = field(default_factory=set)  # agents it read no entry of (booked then)

    def settle(self, now: dt.datetime) -> None:
        """Move the entries whose time has come to `due`."""
        while self.entries and self.entries[0][0] <= now:
            at, agent_id, version = heapq.heappop(self.entries)
            heapq.heappush(self.due, (agent_id, at, version))

    def push(self, entry: Entry, now: dt.datetime) -> None:
        at, agent_id, version = entry
        if at <= now:
            heapq.heappush(self.due, (agent_id, at, version))
        else:
            heapq.heappush(self.entries, entry)

    def pop(self) -> Entry:
        """The first entry (the caller checks there is one): a due one first."""
        if self.due:
            agent_id, at, version = heapq.heappop(self.due)
            return at, agent_id, version
        return heapq.heappop(self.entries)

    def size(self) -> int:
        return len(self.entries) + len(self.due)

    def rebuild(self, pushed: list[Entry], versions: dict[str, int], now: dt.datetime) -> None:
        """Only the entries still current, and `pushed`."""

        def live(agent_id: str, version: int) -> bool:
            return self.fresh.get(agent_id) == version == versions.get(agent_id, 0)

        kept = [e for e in self.entries if live(e[1], e[2])]
        kept += [(at, agent_id, v) for agent_id, at, v in self.due if live(agent_id, v)]
        self.entries, self.due = [], []
        for entry in kept + pushed:
            if entry[0] <= now:
                self.due.append((entry[1], entry[0], entry[2]))
            else:
                self.entries.append(entry)
        heapq.heapify(self.entries)
        heapq.heapify(self.due)


@dataclass
class TimelineMemo:
    occupants_of: Callable[[str], Iterable[Occupant]]
    versions: dict[str, int] = field(default_factory=dict)
    releases: dict[str, tuple[int, list[Release]]] = field(default_factory=dict)
    heaps: dict[tuple[object, ...], SavedHeap] = field(default_factory=dict)
    # per image: the ids of the agents that may run it, a token naming that set, the set
    usable: dict[str, tuple[tuple[str, ...], int, frozenset[str]]] = field(default_factory=dict)

    # every version bump, in order: a kept heap reads what was added since it last looked
    log: list[str] = field(default_factory=list)

    def changed(self, agent_id: str) -> None:
        self.versions[agent_id] = self.versions.get(agent_id, 0) + 1
        self.log.append(agent_id)

    def releases_of(self, agent_id: str) -> list[Release]:
        """The agent's releases, earliest first (a copy the caller may extend)."""
        version = self.versions.get(agent_id, 0)
        kept = self.releases.get(agent_id)
        if kept is None or kept[0] != version:
            found = [
                (o.ends_at, o.slots, o.kernels) for o in self.occupants_of(agent_id) if o.ends_at is not None
            ]
            found.sort(key=lambda r: r[0])
            kept = self.releases[agent_id] = (version, found)
        return list(kept[1])
