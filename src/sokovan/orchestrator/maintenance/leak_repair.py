"""Slots never leak: a kernel still live in a session that has ended holds slots for nothing.

Occupancy is derived from live kernels, so this is the one way slots could drift from what
sessions use; each run ends such kernels (and asks their agents to destroy them), counts them in
`sokovan_slot_drift_total` and logs them. In a healthy cluster the count stays 0.

The other way round, a process an agent still runs for a kernel that has ended (a destroy that
never arrived, a manager that gave up waiting) is destroyed with SIGKILL."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import structlog
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.metrics import SLOT_DRIFT
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.engine import autocommit
from sokovan.db.models import Agent, Kernel, Session
from sokovan.orchestrator.maintenance.reconciler import REPORTING
from sokovan.state.kernel_writes import KernelTransition, apply_kernel_transitions

log = structlog.get_logger(__name__)


# Kernels an agent's latest heartbeat still reports running although they ended (or never existed)
# before that heartbeat was sent: orphaned processes holding the agent's real resources. "Sent" is
# the time the agent signed it (within the bus's skew of Redis's clock), not when the manager
# applied it: heartbeats are read in batches, and one sent just before its kernel ended may be
# applied after the kernel's end was.
_ORPHANS = text(
    """
    SELECT a.id AS agent_id, a.rpc_addr, r.kid
    FROM agents a CROSS JOIN LATERAL jsonb_array_elements_text(a.running_kernels) AS r(kid)
    LEFT JOIN kernels k ON CAST(k.id AS text) = r.kid
    WHERE a.status = ANY(CAST(:reporting AS text[]))
      AND (k.id IS NULL OR (
          k.status = ANY(CAST(:ended AS text[]))
          AND k.terminated_at < COALESCE(a.heartbeat_signed_at, a.last_heartbeat_at)
      ))
    """
)


class LeakRepair:
    def __init__(self, engine: AsyncEngine, rpc: AgentRPCClient) -> None:
        self._engine = engine  # the looks through `autocommit`; a repair writes under a transaction
        self._rpc = rpc

    async def run(self) -> int:
        await self._destroy_orphans()
        return await self._end_leaked_kernels()

    async def _destroy_orphans(self) -> None:
        ended = [s.value for s in KernelStatus.terminal()]
        async with autocommit(self._engine).connect() as conn:
            rows = (await conn.execute(_ORPHANS, {"reporting": REPORTING, "ended": ended})).all()
        per_agent: dict[tuple[str, str], list[str]] = defaultdict(list)
        for r in rows:
            per_agent[(r.agent_id, r.rpc_addr)].append(r.kid)
        if per_agent:
            log.warning("agents.orphan_kernels", kernels=len(rows), agents=len(per_agent))
            await asyncio.gather(
                *(
                    self._rpc.destroy_kernels(addr, ids, True, agent)
                    for (agent, addr), ids in per_agent.items()
                ),
                return_exceptions=True,
            )

    async def _end_leaked_kernels(self) -> int:
        live = [s.value for s in KernelStatus.non_terminal()]
        ended = [s.value for s in SessionStatus.terminal()]
        async with autocommit(self._engine).connect() as conn:
            rows = (
                await conn.execute(
                    select(Kernel.id, Kernel.agent_id, Agent.rpc_addr)
                    .join(Session, Session.id == Kernel.session_id)
                    .outerjoin(Agent, Agent.id == Kernel.agent_id)
                    .where(Session.status.in_(ended), Kernel.status.in_(live))
                )
            ).all()
        if not rows:  # the usual case: a look without a transaction
            return 0
        # Each move is compare-and-set on the kernel's status: one that moved since the look is left.
        async with self._engine.begin() as conn:
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
        if not moved:  # every one had moved on since the look
            return 0
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
