"""READY → DEGRADED: an agent silent for longer than `heartbeat_timeout` takes no new kernels;
its running ones are left alone (a heartbeat within the grace brings it back to READY). No agent
is judged while the reports do not reach this manager, nor from before they resumed (`watch`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import ColumnElement

from sokovan.config.cluster import ClusterConfig
from sokovan.orchestrator.node.backlog import Backlog
from sokovan.orchestrator.node.handler import A, AgentRow, NodeHandler, NodeResult, Verdict, silent_since
from sokovan.orchestrator.node.mass_silence import Holds


class DetectSilence(NodeHandler):
    targets = frozenset({A.READY})
    moves_to = A.DEGRADED

    def __init__(self, config: ClusterConfig, backlog: Backlog, holds: Holds) -> None:
        self._config = config
        self._backlog = backlog
        self._holds = holds

    def narrow(self, now: dt.datetime) -> ColumnElement[bool]:
        """Only agents silent past the timeout by their row (the lane's measure is never longer)."""
        return silent_since(now - dt.timedelta(seconds=self._config.node_lifecycle.heartbeat_timeout))

    async def execute(self, rows: Sequence[AgentRow]) -> NodeResult:
        result = NodeResult()
        now = dt.datetime.now(dt.UTC)
        if self._holds.blind(now) or await self._backlog.lagging():
            return result
        timeout = self._config.node_lifecycle.heartbeat_timeout
        for row in rows:
            quiet = self._holds.silence(row, now)
            if quiet > timeout:  # strictly longer than the timeout
                result.moves[row.id] = Verdict(f"no heartbeat for {quiet:.1f}s (timeout {timeout:g}s)")
        return result
