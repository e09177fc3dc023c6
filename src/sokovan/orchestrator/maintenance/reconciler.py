"""Self-healing for lost agent events: ask agents to re-tell what their kernels are doing.

A kernel left longer than `reconcile_after` in a status that waits for an agent's event
(PREPARING/PULLING: the image; CREATING: the start; TERMINATING: the end), or a RUNNING kernel its
agent's latest heartbeat no longer lists, is put to its agent in one `reconcile` RPC per agent. The
agent answers with the events that describe each kernel now, and they take the ordinary guarded path.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import defaultdict
from typing import Literal

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.rpc import AgentRPCClient, ReconcileItem
from sokovan.common.types import AgentStatus, KernelStatus
from sokovan.db.engine import autocommit

log = structlog.get_logger(__name__)
# Agents that beat and answer, as SQL parameters (shared with LeakRepair).
REPORTING = sorted(s.value for s in AgentStatus.reporting())

# The phase an agent is asked about, per kernel status a suspect can be in.
_PHASE: dict[KernelStatus, Literal["pull", "run", "terminate"]] = {
    KernelStatus.PREPARING: "pull",
    KernelStatus.PULLING: "pull",
    KernelStatus.CREATING: "run",
    KernelStatus.RUNNING: "run",
    KernelStatus.TERMINATING: "terminate",
}
# The statuses in which a kernel waits for its agent's event; RUNNING is checked against the
# agent's heartbeat instead.
_AWAITING_EVENT = [s.value for s in _PHASE if s is not KernelStatus.RUNNING]

_SUSPECTS = text(
    """
    SELECT k.id, k.session_id, k.status, k.agent_id, a.rpc_addr, s.image
    FROM kernels k
    JOIN agents a ON a.id = k.agent_id
    JOIN sessions s ON s.id = k.session_id
    WHERE a.status = ANY(CAST(:reporting AS text[])) AND (
        (k.status = ANY(CAST(:awaiting AS text[])) AND k.status_changed_at < :before)
        OR (k.status = :running AND k.status_changed_at < :before
            AND a.last_heartbeat_at > k.status_changed_at + make_interval(secs => :grace)
            AND NOT (a.running_kernels ? CAST(k.id AS text)))
    )
    ORDER BY k.status_changed_at
    LIMIT :limit
    """
)


class KernelReconciler:
    def __init__(self, engine: AsyncEngine, rpc: AgentRPCClient, limit: int = 5000) -> None:
        self._engine = engine  # it reads, through `autocommit`; the agents' answers write
        self._rpc = rpc
        self._limit = limit

    async def run(self, reconcile_after: float) -> int:
        """Returns how many kernels were put to their agents."""
        before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=reconcile_after)
        async with autocommit(self._engine).connect() as conn:
            rows = (
                await conn.execute(
                    _SUSPECTS,
                    {
                        "reporting": REPORTING,
                        "awaiting": _AWAITING_EVENT,
                        "running": KernelStatus.RUNNING.value,
                        "before": before,
                        "grace": reconcile_after,
                        "limit": self._limit,
                    },
                )
            ).all()
        per_agent: dict[tuple[str, str], list[ReconcileItem]] = defaultdict(list)
        for r in rows:
            per_agent[(r.agent_id, r.rpc_addr)].append(
                ReconcileItem(
                    kernel_id=str(r.id), session_id=str(r.session_id), image=r.image, phase=_PHASE[r.status]
                )
            )
        if not per_agent:
            return 0
        targets = list(per_agent)
        outcomes = await asyncio.gather(
            *(self._rpc.reconcile(addr, per_agent[(agent, addr)], agent) for agent, addr in targets),
            return_exceptions=True,
        )
        for (agent, _), outcome in zip(targets, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.warning("reconcile.agent_unreachable", agent_id=agent, error=str(outcome))
        log.info("reconcile.asked", kernels=len(rows), agents=len(targets))
        return len(rows)
