"""Publishes the agents-by-status gauge (`sokovan_agents{status}`) every cycle; moves nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from sokovan.common.metrics import AGENTS_BY_STATUS
from sokovan.common.types import AgentStatus
from sokovan.orchestrator.node.handler import AgentRow, NodeHandler, NodeResult


class CountAgents(NodeHandler):
    targets = frozenset(AgentStatus)
    moves_to = None
    always_runs = True

    async def execute(self, rows: Sequence[AgentRow]) -> NodeResult:
        counts = Counter(r.status for r in rows)
        for status in AgentStatus:
            AGENTS_BY_STATUS.labels(status=status.value).set(counts.get(status.value, 0))
        return NodeResult()
