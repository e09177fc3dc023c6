"""Slots never leak: a kernel still live in a session that has ended holds slots for nothing.

Occupancy is derived from live kernels, so this is the one way slots could drift from what
sessions use; each run ends such kernels (and asks their agents to destroy them), counts them in
`sokovan_slot_drift_total` and logs them. In a healthy cluster the count stays 0."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.metrics import SLOT_DRIFT
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Agent, Kernel, Session
from sokovan.manager.repositories.transitions import KernelTransition, apply_kernel_transitions

log = structlog.get_logger(__name__)


class LeakRepair:
    def __init__(self, engine: AsyncEngine, rpc: AgentRPCClient) -> None:
        self._engine = engine
        self._rpc = rpc

    async def run(self) -> int:
        live = [s.value for s in KernelStatus.non_terminal()]
        ended = [s.value for s in SessionStatus.terminal()]
        async with self._engine.begin() as conn:
            rows = (
                await conn.execute(
                    select(Kernel.id, Kernel.agent_id, Agent.rpc_addr)
                    .join(Session, Session.id == Kernel.session_id)
                    .outerjoin(Agent, Agent.id == Kernel.agent_id)
                    .where(Session.status.in_(ended), Kernel.status.in_(live))
                )
            ).all()
            if not rows:
                return 0
            moved = await apply_kernel_transitions(
                conn,
                [
                    KernelTransition(
                        kernel_id=r.id,
                        expected=KernelStatus.non_terminal(),
                        to_status=KernelStatus.TERMINATED,
                        source="maintenance.leak_repair",
                        message="live kernel of an ended session",
                    )
                    for r in rows
                ],
            )
        SLOT_DRIFT.inc(len(moved))
        log.error("slots.drift_repaired", kernels=len(moved))
        per_agent: dict[tuple[str, str], list[str]] = defaultdict(list)
        for r in rows:
            if r.agent_id is not None and r.rpc_addr is not None:
                per_agent[(r.agent_id, r.rpc_addr)].append(str(r.id))
        await asyncio.gather(
            *(self._rpc.destroy_kernels(addr, ids, True, agent) for (agent, addr), ids in per_agent.items()),
            return_exceptions=True,
        )
        return len(moved)
