"""DRAINING → DRAINED once no live kernel is left on the agent.

A draining agent that falls silent for longer than its timeout plus grace is DRAINED too, and its
kernels are ended with AGENT_TRANSIENT (as for DOWN), so nothing waits on a node that is gone; the
operator's drain stays in force (DRAINED never goes DOWN on silence, and is undone only by undrain).
Silence is judged as ConfirmDown judges it: not while the agent's scaling group is in a mass
silence or while the reports do not reach this manager, and never from before such a hold ended
or the reports resumed (`Holds`, `watch`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Kernel
from sokovan.orchestrator.node.handler import A, AgentRow, NodeHandler, NodeResult, Verdict
from sokovan.orchestrator.node.mass_silence import Holds
from sokovan.state.occupancy import slot_holding


class CompleteDrain(NodeHandler):
    targets = frozenset({A.DRAINING})
    moves_to = A.DRAINED

    def __init__(self, engine: AsyncEngine, config: ClusterConfig, holds: Holds) -> None:
        self._engine = engine
        self._config = config
        self._holds = holds

    async def execute(self, rows: Sequence[AgentRow]) -> NodeResult:
        result = NodeResult()
        async with self._engine.connect() as conn:
            counted = await conn.execute(
                select(Kernel.agent_id, func.count())
                .where(Kernel.agent_id.in_([r.id for r in rows]), Kernel.status.in_(slot_holding()))
                .group_by(Kernel.agent_id)
            )
            live: dict[str | None, int] = {agent_id: n for agent_id, n in counted}
        settings = self._config.node_lifecycle
        now = dt.datetime.now(dt.UTC)
        blind = self._holds.blind(now)
        for row in rows:
            quiet = self._holds.silence(row, now)
            limit = settings.heartbeat_timeout + settings.grace_period.of(row.agent_class)
            if not live.get(row.id):
                result.moves[row.id] = Verdict("no live kernel left")
            elif not blind and quiet > limit and row.scaling_group not in self._holds.held:
                reason = f"silent for {quiet:.1f}s while draining: its kernels are ended"
                result.moves[row.id] = Verdict(reason, end_kernels=True)
        return result
