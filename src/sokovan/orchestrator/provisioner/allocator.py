"""Commits a plan in one transaction whose SQL refuses any agent going past its capacity.

The agents of the plan are locked (in id order, so concurrent allocators cannot deadlock); then
one statement binds the whole plan only if it fits: every kernel still PENDING and unplaced, and
no touched agent, with the plan's kernels counted in, past its capacity or kernel limit (read
after the lock, so whatever another allocator bound to these agents is counted). If a kernel was
taken by someone else or an agent would be overfull (another manager placed meanwhile), nothing is
bound and the plan is replayed session by session with the same statement, so that only the
sessions that conflict are left for the next cycle. Four round trips for a plan that fits: BEGIN,
the lock, the bind, COMMIT; three more when it places kernels that ask for GPUs, which get their
devices in the same transaction (`provisioner.devices`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.types import AgentStatus, KernelStatus
from sokovan.db.models import ScalingGroup
from sokovan.orchestrator.provisioner.devices import assign_devices
from sokovan.orchestrator.provisioner.reasons import PLACED_MEANWHILE, filled_up
from sokovan.orchestrator.provisioner.snapshot import Placement, Plan
from sokovan.state.occupancy import slot_holding

_LOCK = text("SELECT id FROM agents WHERE id = ANY(CAST(:agents AS text[])) ORDER BY id FOR UPDATE")

# The kernels to bind that are still free (locked), what the touched agents would hold with them
# (the kernels of one shape counted first, as in `occupancy`), the agents that would be past their
# room, and the bind itself only when all are free and none is.
_BIND_IF_FITS = text(
    """
    WITH v AS (
        SELECT unnest(CAST(:kernels AS uuid[])) AS kernel, unnest(CAST(:targets AS text[])) AS agent
    ), free AS MATERIALIZED (
        SELECT k.id, v.agent, k.occupied_slots FROM kernels k JOIN v ON v.kernel = k.id
        WHERE k.id IN (SELECT unnest(CAST(:kernels AS uuid[]))) AND k.status = :pending
          AND k.agent_id IS NULL
        ORDER BY k.id
        FOR NO KEY UPDATE OF k
    ), live AS (
        SELECT k.agent_id, k.occupied_slots FROM kernels k
        WHERE k.agent_id = ANY(CAST(:agents AS text[])) AND k.status = ANY(CAST(:live AS text[]))
        UNION ALL
        SELECT agent, occupied_slots FROM free
    ), shapes AS (
        SELECT agent_id, occupied_slots, count(*) AS n FROM live GROUP BY agent_id, occupied_slots
    ), used AS (
        SELECT g.agent_id, s.key, sum(s.value::numeric * g.n) AS amount
        FROM shapes g CROSS JOIN LATERAL jsonb_each_text(g.occupied_slots) AS s(key, value)
        GROUP BY g.agent_id, s.key
    ), counts AS (
        SELECT agent_id, sum(n) AS n FROM shapes GROUP BY agent_id
    ), overfull AS (
        SELECT a.id FROM agents a
        WHERE a.id = ANY(CAST(:agents AS text[])) AND (
            a.status <> :ready OR NOT a.schedulable
            OR EXISTS (SELECT 1 FROM used u WHERE u.agent_id = a.id
                       AND u.amount > COALESCE((a.available_slots ->> u.key)::numeric, 0))
            OR EXISTS (SELECT 1 FROM counts c WHERE c.agent_id = a.id AND c.n > a.max_kernels)
        )
    ), bound AS (
        UPDATE kernels AS k SET agent_id = f.agent FROM free f
        WHERE k.id = f.id
          AND (SELECT count(*) FROM free) = cardinality(CAST(:kernels AS uuid[]))
          AND NOT EXISTS (SELECT 1 FROM overfull)
        RETURNING k.id
    )
    SELECT (SELECT count(*) FROM free) AS free,
           (SELECT array_agg(id ORDER BY id) FROM overfull) AS overfull,
           (SELECT count(*) FROM bound) AS bound
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
        await conn.execute(_LOCK, {"agents": agent_ids})
        committed: list[uuid.UUID]
        conflicts: dict[uuid.UUID, str]
        try:
            await self._bind(conn, plan.placements, agent_ids)
            committed, conflicts = [p.session_id for p in plan.placements], {}
        except Conflict:
            committed, conflicts = await self._one_by_one(conn, plan.placements)
        placed = set(committed)
        await assign_devices(conn, [p for p in plan.placements if p.session_id in placed])
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
            try:
                await self._bind(conn, [placement], sorted(set(placement.kernels.values())))
                committed.append(placement.session_id)
            except Conflict as exc:
                conflicts[placement.session_id] = str(exc)
        return committed, conflicts

    @staticmethod
    async def _bind(conn: AsyncConnection, placements: Sequence[Placement], agent_ids: list[str]) -> None:
        """Bind `placements` whole, or nothing (Conflict)."""
        pairs = [(k, a) for p in placements for k, a in p.kernels.items()]
        row = (
            await conn.execute(
                _BIND_IF_FITS,
                {
                    "kernels": [k for k, _ in pairs],
                    "targets": [a for _, a in pairs],
                    "agents": agent_ids,
                    "pending": KernelStatus.PENDING.value,
                    "live": slot_holding(),
                    "ready": AgentStatus.READY.value,
                },
            )
        ).one()
        if row.free != len(pairs):
            raise AlreadyPlaced()
        if row.overfull:
            raise Overfull(sorted(row.overfull))
