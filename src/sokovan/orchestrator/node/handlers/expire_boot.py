"""BOOTING → FAILED: an agent that has not reported healthy within `boot_timeout` (the other way
to FAILED, three unhealthy boot reports in a row, is the heartbeats' rule)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sokovan.config.cluster import ClusterConfig
from sokovan.orchestrator.node.handler import A, AgentRow, NodeHandler, NodeResult, Verdict


class ExpireBoot(NodeHandler):
    targets = frozenset({A.BOOTING})
    moves_to = A.FAILED

    def __init__(self, config: ClusterConfig) -> None:
        self._config = config

    async def execute(self, rows: Sequence[AgentRow]) -> NodeResult:
        result = NodeResult()
        limit = self._config.node_lifecycle.boot_timeout
        now = dt.datetime.now(dt.UTC)
        for row in rows:
            booting = (now - row.status_changed_at).total_seconds()
            if booting > limit:
                result.moves[row.id] = Verdict(f"not healthy within the boot timeout ({limit:g}s)")
        return result
