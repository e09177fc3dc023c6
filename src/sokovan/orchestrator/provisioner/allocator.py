"""Commits a plan in one guarded transaction.

Agents are locked (SELECT … FOR UPDATE, in id order so that concurrent allocators cannot
deadlock), their occupancy is recomputed from the kernels, and each placement is written only
if it still fits. A placement that no longer fits is returned as a conflict for the next cycle:
no agent is ever over-allocated, whatever other managers do at the same time.
"""

from __future__ import annotations

import uuid

from sqlalchemy import and_, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus, KernelStatus
from sokovan.db.models import Agent, Kernel
from sokovan.orchestrator.provisioner.snapshot import Plan
from sokovan.orchestrator.schedule.repository import agent_occupancy


class RepositoryAllocator:
    async def allocate(
        self, conn: AsyncConnection, plan: Plan
    ) -> tuple[list[uuid.UUID], dict[uuid.UUID, str]]:
        """Returns the sessions whose kernels were bound to agents and the conflicts (id → reason)."""
        committed: list[uuid.UUID] = []
        conflicts: dict[uuid.UUID, str] = {}
        agent_ids = sorted({a for p in plan.placements for a in p.kernels.values()})
        if not agent_ids:
            return committed, conflicts
        rows = await conn.execute(
            select(Agent.id, Agent.status, Agent.schedulable, Agent.available_slots, Agent.max_kernels)
            .where(Agent.id.in_(agent_ids))
            .order_by(Agent.id)
            .with_for_update()
        )
        agents = {r.id: r for r in rows}
        occupied, counts = await agent_occupancy(conn, agent_ids)
        bindings: list[dict[str, object]] = []
        for placement in plan.placements:
            need: dict[str, ResourceSlots] = {}
            for agent_id in placement.kernels.values():
                need[agent_id] = need.get(agent_id, ResourceSlots()) + placement.slots_per_kernel
            problem = None
            for agent_id, slots in need.items():
                row = agents.get(agent_id)
                if row is None or row.status != AgentStatus.READY or not row.schedulable:
                    problem = f"agent {agent_id} is no longer available"
                    break
                free = ResourceSlots.from_json(row.available_slots) - occupied.get(agent_id, ResourceSlots())
                if not slots.fits_in(free):
                    problem = f"agent {agent_id} filled up meanwhile"
                    break
                kernels_here = sum(1 for a in placement.kernels.values() if a == agent_id)
                if row.max_kernels is not None and counts.get(agent_id, 0) + kernels_here > row.max_kernels:
                    problem = f"agent {agent_id} reached its kernel limit meanwhile"
                    break
            if problem is not None:
                conflicts[placement.session_id] = problem
                continue
            for agent_id, slots in need.items():
                occupied[agent_id] = occupied.get(agent_id, ResourceSlots()) + slots
            for kernel_id, agent_id in placement.kernels.items():
                counts[agent_id] = counts.get(agent_id, 0) + 1
                bindings.append({"b_kernel": kernel_id, "b_agent": agent_id})
            committed.append(placement.session_id)
        if bindings:
            await conn.execute(
                update(Kernel)
                .where(
                    and_(
                        Kernel.id == bindparam("b_kernel"),
                        Kernel.status == KernelStatus.PENDING.value,
                        Kernel.agent_id.is_(None),
                    )
                )
                .values(agent_id=bindparam("b_agent"))
                .execution_options(synchronize_session=False),
                bindings,
            )
        return committed, conflicts
