"""What placement reads of each agent that changes only when the agent reports new capacity or
images: its capacity (`available_slots`) and its images, parsed once per change instead of once per
cycle.

A placement cycle reads every agent of the scaling groups it places in. Decoding a thousand agents'
capacity and image lists took about 12 ms of a cycle that placed one session; the database itself
answers the read in under a millisecond. So the cycle reads each agent's status and a fingerprint
of those two columns (`statics_fingerprint`, an `md5` PostgreSQL stores when the row is written,
not computed at each read), and the columns themselves only for the agents whose fingerprint is
not the one parsed last time: after a change, a restart of the manager, or an agent it never saw.
What a snapshot holds is exactly what the table holds at the read. Agents of one shape (the same
capacity and images) share the parsed objects.

Most cycles find no agent changed at all (heartbeats do not touch what is read here), so the read
first compares the groups' version tokens (`agent_set_versions`, which triggers on `agents` change
in the writer's own transaction whenever an agent is added, removed, or changes a column read
here) with the ones behind the list built last time: when they are equal the statement returns
that one row and the list is reused; when not, the same statement returns the agents' rows. (The
tokens replaced a digest PostgreSQL computed over every agent's row at every cycle: 4 ms of its
CPU per placement cycle on a fleet of a thousand.)"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus
from sokovan.db.among import among
from sokovan.db.models import Agent


@dataclass(frozen=True)
class Statics:
    fingerprint: str
    available: ResourceSlots  # never changed in place: snapshots derive new slots from it
    images: frozenset[str]


@dataclass(frozen=True)
class AgentRead:
    id: str
    scaling_group: str
    status: AgentStatus  # converted once per read row, not per cycle (a thousand agents)
    schedulable: bool
    max_kernels: int | None
    statics: Statics


_MAX_LISTS = 64  # sets of scaling groups whose lists are kept
_MAX_SHAPES = 4096  # distinct (capacity, images) pairs kept for sharing
Shape = tuple[tuple[tuple[str, Decimal], ...], frozenset[str]]

# The version tokens of some scaling groups' agents (`agent_set_versions`, changed by triggers with
# every write to what placement reads) and, only when they are not the ones the caller knows, the
# agents themselves with their fingerprints: one statement, so the tokens and the rows are of one
# snapshot. An unchanged fleet costs an index probe; the agents' branch is not run at all (its
# filter on the tokens is a one-time filter).
_AGENTS = text(
    """
    WITH v AS MATERIALIZED (
        SELECT coalesce(string_agg(scaling_group || ':' || CAST(version AS TEXT), ','
                                   ORDER BY scaling_group), '') AS digest
        FROM agent_set_versions WHERE scaling_group = ANY(:groups)
    )
    SELECT v.digest, CAST(NULL AS TEXT) AS id, CAST(NULL AS TEXT) AS scaling_group,
           CAST(NULL AS TEXT) AS status, CAST(NULL AS BOOLEAN) AS schedulable,
           CAST(NULL AS INTEGER) AS max_kernels, CAST(NULL AS TEXT) AS fingerprint
    FROM v
    UNION ALL
    SELECT NULL, id, scaling_group, status, schedulable, max_kernels, statics_fingerprint
    FROM agents WHERE scaling_group = ANY(:groups) AND (SELECT digest FROM v) IS DISTINCT FROM :known
    ORDER BY id NULLS FIRST
    """
)


class AgentStatics:
    """Per process: the parsed capacity and images of each agent, by the digest they came from, and
    the list last read for each set of scaling groups, by the digest of all its agents."""

    def __init__(self) -> None:
        self._by_id: dict[str, Statics] = {}
        self._lists: dict[tuple[str, ...], tuple[str | None, list[AgentRead]]] = {}
        self._shapes: dict[Shape, tuple[ResourceSlots, frozenset[str]]] = {}

    async def read(self, conn: AsyncConnection, scaling_groups: Sequence[str]) -> list[AgentRead]:
        """The agents of `scaling_groups`, by id: one statement when nothing changed, two when an
        agent's capacity or images did."""
        key = tuple(sorted(scaling_groups))
        known, last = self._lists.get(key, (None, []))
        result = await conn.execute(_AGENTS, {"groups": list(key), "known": known})
        found = result.all()
        digest = next((r.digest for r in found if r.id is None), "")
        rows = [r for r in found if r.id is not None]
        if not rows and digest == known:
            return list(last)
        stale = [r.id for r in rows if (s := self._by_id.get(r.id)) is None or s.fingerprint != r.fingerprint]
        if stale:
            await self._parse(conn, stale)
        if len(self._by_id) > 2 * len(rows) + 1000:  # agents gone (or of other groups): start over
            keep = {r.id for r in rows}
            self._by_id = {k: v for k, v in self._by_id.items() if k in keep}
        # An agent whose columns changed between the two reads gets its newest (one consistent
        # row); one deleted between them is left out. Either way the list is not the one the
        # digest describes, and is not kept.
        agents: list[AgentRead] = []
        described = True
        for r in rows:
            statics = self._by_id.get(r.id)
            if statics is None:
                described = False
                continue
            described &= statics.fingerprint == r.fingerprint
            agents.append(
                AgentRead(r.id, r.scaling_group, AgentStatus(r.status), r.schedulable, r.max_kernels, statics)
            )
        if len(self._lists) >= _MAX_LISTS:
            self._lists.clear()
        if described:
            self._lists[key] = (digest, agents)
        else:
            self._lists.pop(key, None)
        return list(agents)

    async def _parse(self, conn: AsyncConnection, ids: list[str]) -> None:
        parsed = await conn.execute(
            select(
                Agent.id, Agent.available_slots, Agent.images, Agent.statics_fingerprint.label("fingerprint")
            ).where(among(Agent.id, ids))
        )
        for r in parsed:
            self._by_id[r.id] = self._statics(r)

    def _statics(self, row: Any) -> Statics:
        """One agent's parsed columns. Agents of the same shape share one capacity object (and one
        image set), so what placement derives from a capacity is computed once per shape."""
        available = ResourceSlots.from_json(row.available_slots)
        images = frozenset(row.images or ())
        shape = (tuple(sorted(available.items())), images)
        shared = self._shapes.get(shape)
        if shared is None:
            if len(self._shapes) >= _MAX_SHAPES:
                self._shapes.clear()
            shared = self._shapes[shape] = (available, images)
        return Statics(row.fingerprint, shared[0], shared[1])


# The manager's one cache (placement and dry runs share it).
AGENT_STATICS = AgentStatics()
