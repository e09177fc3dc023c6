"""Publishes the agents-by-status gauge (`sokovan_agents{status}`) every cycle; moves nothing.

It is given no rows: one `GROUP BY status` counts the fleet, whatever its size."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select

from sokovan.common.metrics import AGENTS_BY_STATUS
from sokovan.common.types import AgentStatus
from sokovan.db.engine import autocommit
from sokovan.db.models import Agent
from sokovan.orchestrator.node.handler import AgentRow, FleetGauge, NodeResult


class CountAgents(FleetGauge):
    async def execute(self, rows: Sequence[AgentRow]) -> NodeResult:
        async with autocommit(self._engine).connect() as conn:
            counted = await conn.execute(select(Agent.status, func.count()).group_by(Agent.status))
            counts: dict[str, int] = {status: n for status, n in counted}
        for status in AgentStatus:
            AGENTS_BY_STATUS.labels(status=status.value).set(counts.get(status.value, 0))
        return NodeResult()
