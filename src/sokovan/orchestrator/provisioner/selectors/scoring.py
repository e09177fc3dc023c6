"""An ordered index of agents by free room, in the group's resource priority.

Concentrated walks it from the least room up, dispersed from the most room down. Bisection on
the first priority slot skips every agent that cannot hold the request's amount of it, so a pick
costs O(log n) plus the agents it has to look at; after a placement only that agent is re-keyed.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from decimal import Decimal

from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, ScalingGroupSnapshot
from sokovan.state.session_reads import SessionWithKernels

Key = tuple[tuple[Decimal, ...], str]


def free_room(agent: AgentSnapshot, priority: tuple[str, ...]) -> tuple[Decimal, ...]:
    free = agent.free
    return tuple(free.get(slot, Decimal(0)) for slot in priority)


class FreeRoomIndex:
    def __init__(self, snapshot: ScalingGroupSnapshot) -> None:
        # Slots no agent of the group has (e.g. GPUs in a CPU group) would make every key equal
        # in them; leaving them out lets the bisection work on the first slot that matters.
        # Agents of one shape share their capacity object (`agent_statics`), and an agent holding
        # nothing has that object as its free room: each distinct object is looked at once.
        shapes = {id(a.available): a.available for a in snapshot.agents}
        present = {name for slots in shapes.values() for name, amount in slots.items() if amount > 0}
        self._priority = tuple(s for s in snapshot.resource_priority if s in present) or ("cpu",)
        self._agents = {a.id: a for a in snapshot.agents}
        rooms: dict[int, tuple[Decimal, ...]] = {}
        self._keys: dict[str, Key] = {}
        for a in snapshot.agents:
            room = rooms.get(id(a.free))
            if room is None:
                room = rooms[id(a.free)] = free_room(a, self._priority)
            self._keys[a.id] = (room, a.id)
        self._sorted: list[Key] = sorted(self._keys.values())

    def _key(self, agent: AgentSnapshot) -> Key:
        return free_room(agent, self._priority), agent.id

    def rekey(self, agent: AgentSnapshot) -> None:
        old = self._keys.get(agent.id)
        if old is not None:
            del self._sorted[bisect.bisect_left(self._sorted, old)]
        key = self._key(agent)
        self._keys[agent.id] = key
        bisect.insort(self._sorted, key)

    def walk(self, session: SessionWithKernels, descending: bool) -> Iterator[AgentSnapshot]:
        need = session.resources.get(self._priority[0], Decimal(0))
        start = bisect.bisect_left(self._sorted, ((need,), ""))
        keys = reversed(self._sorted[start:]) if descending else iter(self._sorted[start:])
        for _, agent_id in keys:
            yield self._agents[agent_id]


class IndexedSelector:
    """Shared body of the selectors that walk a `FreeRoomIndex` (built on first use per cycle)."""

    name = ""
    descending = False

    def __init__(self) -> None:
        self._index: FreeRoomIndex | None = None

    def pick(
        self,
        session: SessionWithKernels,
        fits: Callable[[AgentSnapshot], bool],
        snapshot: ScalingGroupSnapshot,
    ) -> AgentSnapshot | None:
        if self._index is None:
            self._index = FreeRoomIndex(snapshot)
        return next((a for a in self._index.walk(session, self.descending) if fits(a)), None)

    def taken(self, agent: AgentSnapshot) -> None:
        if self._index is not None:
            self._index.rekey(agent)
