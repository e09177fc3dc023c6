"""Commits a plan in one transaction whose SQL refuses any agent going past its capacity.

The agents of the plan are locked (in id order, so concurrent allocators cannot deadlock) and
the whole plan is bound in one statement inside a savepoint: a kernel is bound only if it is
still PENDING and unplaced. One query then checks, in SQL, that no touched agent holds more than
its capacity or kernel limit. If a kernel was taken by someone else or an agent is overfull
(another manager placed meanwhile), the savepoint is rolled back and the plan is replayed
session by session, each in its own savepoint, so that only the sessions that conflict are left
for the next cycle.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.types import AgentStatus, KernelStatus
from sokovan.db.among import among
from sokovan.db.models import Agent, ScalingGroup
from sokovan.orchestrator.provisioner.reasons import PLACED_MEANWHILE, filled_up
from sokovan.orchestrator.provisioner.snapshot import Placement, Plan
from sokovan.state.occupancy import slot_holding

_OVERFULL = text(
    """
    WITH used AS (
        SELECT k.agent_id, s.key, sum(s.value::numeric) AS amount
        FROM kernels k CROSS JOIN LATERAL jsonb_each_text(k.occupied_slots) AS s(key, value)
        WHERE k.agent_id = ANY(:agents) AND k.status = ANY(:live)
        GROUP BY k.agent_id, s.key
    ), counts AS (
        SELECT k.agent_id, count(*) AS n FROM kernels k
        WHERE k.agent_id = ANY(:agents) AND k.status = ANY(:live)
        GROUP BY k.agent_id
    )
    SELECT a.id FROM agents a
    WHERE a.id = ANY(:agents) AND (
        a.status <> :ready OR NOT a.schedulable
        OR EXISTS (SELECT 1 FROM used u WHERE u.agent_id = a.id
                   AND u.amount > COALESCE((a.available_slots ->> u.key)::numeric, 0))
        OR EXISTS (SELECT 1 FROM counts c WHERE c.agent_id = a.id AND c.n > a.max_kernels)
    )
    """
)


_BIND = text(
    """
    UPDATE kernels AS k SET agent_id = v.agent
    FROM (SELECT unnest(CAST(:kernels AS uuid[])) AS kernel, unnest(CAST(:agents AS text[])) AS agent) AS v
    WHERE k.id = v.kernel AND k.status = :pending AND k.agent_id IS NULL
    RETURNING k.id
    """
)


class Conflict(Exception):
    """Part of a plan cannot be committed as computed."""


class Overfull(Conflict):
    def __init__(self, agents: list[str]) -> None:
        super().__init__(filled_up(agents))


class AlreadyPlaced(Conflict):
    def __init__(self) -> None:
        super().__init__(PLACED_MEANWHILE)


class RepositoryAllocator:
    async def allocate(
        self, conn: AsyncConnection, plan: Plan, scaling_group: str | None = None
    ) -> tuple[list[uuid.UUID], dict[uuid.UUID, str]]:
        """Returns the sessions whose kernels were bound to agents and the conflicts (id → reason)."""
        if not plan.placements:
            return [], {}
        agent_ids = sorted({a for p in plan.placements for a in p.kernels.values()})
        await conn.execute(
            select(Agent.id).where(among(Agent.id, agent_ids)).order_by(Agent.id).with_for_update()
        )
        committed: list[uuid.UUID]
        conflicts: dict[uuid.UUID, str]
        try:
            async with conn.begin_nested():
                await self._bind(conn, plan.placements)
                await self._refuse_overfull(conn, agent_ids)
            committed, conflicts = [p.session_id for p in plan.placements], {}
        except Conflict:
            committed, conflicts = await self._one_by_one(conn, plan.placements)
        if scaling_group is not None and plan.roundrobin_cursor is not None:
            await conn.execute(
                update(ScalingGroup)
                .where(ScalingGroup.name == scaling_group)
                .values(roundrobin_cursor=plan.roundrobin_cursor)
            )
        return committed, conflicts

    async def _one_by_one(
        self, conn: AsyncConnection, placements: Sequence[Placement]
    ) -> tuple[list[uuid.UUID], dict[uuid.UUID, str]]:
        committed: list[uuid.UUID] = []
        conflicts: dict[uuid.UUID, str] = {}
        for placement in placements:
            agents = sorted(set(placement.kernels.values()))
            try:
                async with conn.begin_nested():
                    await self._bind(conn, [placement])
                    await self._refuse_overfull(conn, agents)
                committed.append(placement.session_id)
            except Conflict as exc:
                conflicts[placement.session_id] = str(exc)
        return committed, conflicts

    @staticmethod
    async def _bind(conn: AsyncConnection, placements: Sequence[Placement]) -> None:
        pairs = [(k, a) for p in placements for k, a in p.kernels.items()]
        bound = await conn.execute(
            _BIND,
            {
                "kernels": [k for k, _ in pairs],
                "agents": [a for _, a in pairs],
                "pending": KernelStatus.PENDING.value,
            },
        )
        if len(bound.all()) != len(pairs):
            raise AlreadyPlaced()

    @staticmethod
    async def _refuse_overfull(conn: AsyncConnection, agent_ids: list[str]) -> None:
        rows = await conn.execute(
            _OVERFULL, {"agents": agent_ids, "live": slot_holding(), "ready": AgentStatus.READY.value}
        )
        overfull = sorted(r[0] for r in rows)
        if overfull:
            raise Overfull(overfull)
