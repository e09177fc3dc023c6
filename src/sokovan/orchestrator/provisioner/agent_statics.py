"""What placement reads of each agent that changes only when the agent reports new capacity or
images: its capacity (`available_slots`) and its images, parsed once per change instead of once per
cycle.

A placement cycle reads every agent of the scaling groups it places in. Decoding a thousand agents'
capacity and image lists took about 12 ms of a cycle that placed one session; the database itself
answers the read in under a millisecond. So the cycle reads each agent's status and a fingerprint
of those two columns (`md5`, computed by PostgreSQL), and the columns themselves only for the agents
whose fingerprint is not the one parsed last time: after a change, a restart of the manager, or an
agent it never saw. What a snapshot holds is exactly what the table holds at the read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Text, cast, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.db.among import among
from sokovan.db.models import Agent

# PostgreSQL's digest of the columns parsed here: equal digests, equal columns.
_FINGERPRINT = func.md5(func.concat(cast(Agent.available_slots, Text), "|", cast(Agent.images, Text))).label(
    "fingerprint"
)


@dataclass(frozen=True)
class Statics:
    fingerprint: str
    available: ResourceSlots  # never changed in place: snapshots derive new slots from it
    images: frozenset[str]


@dataclass(frozen=True)
class AgentRead:
    id: str
    scaling_group: str
    status: str
    schedulable: bool
    max_kernels: int | None
    statics: Statics


class AgentStatics:
    """Per process: the parsed capacity and images of each agent, by the digest they came from."""

    def __init__(self) -> None:
        self._by_id: dict[str, Statics] = {}

    async def read(self, conn: AsyncConnection, scaling_groups: Sequence[str]) -> list[AgentRead]:
        """The agents of `scaling_groups`, by id: two statements at most, one when nothing changed."""
        rows = (
            await conn.execute(
                select(
                    Agent.id,
                    Agent.scaling_group,
                    Agent.status,
                    Agent.schedulable,
                    Agent.max_kernels,
                    _FINGERPRINT,
                )
                .where(Agent.scaling_group.in_(scaling_groups))
                .order_by(Agent.id)
            )
        ).all()
        stale = [r.id for r in rows if (s := self._by_id.get(r.id)) is None or s.fingerprint != r.fingerprint]
        if stale:
            await self._parse(conn, stale)
        if len(self._by_id) > 2 * len(rows) + 1000:  # agents gone (or of other groups): start over
            keep = {r.id for r in rows}
            self._by_id = {k: v for k, v in self._by_id.items() if k in keep}
        # An agent whose columns changed between the two reads gets its newest (one consistent
        # row); one deleted between them is left out.
        return [
            AgentRead(r.id, r.scaling_group, r.status, r.schedulable, r.max_kernels, self._by_id[r.id])
            for r in rows
            if r.id in self._by_id
        ]

    async def _parse(self, conn: AsyncConnection, ids: list[str]) -> None:
        parsed = await conn.execute(
            select(Agent.id, Agent.available_slots, Agent.images, _FINGERPRINT).where(among(Agent.id, ids))
        )
        for r in parsed:
            self._by_id[r.id] = _statics(r)


def _statics(row: Any) -> Statics:
    return Statics(row.fingerprint, ResourceSlots.from_json(row.available_slots), frozenset(row.images or ()))


# The manager's one cache (placement and dry runs share it).
AGENT_STATICS = AgentStatics()
