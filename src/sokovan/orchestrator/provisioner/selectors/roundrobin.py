"""Round-robin over the agents in id order: the first fitting agent after the last one picked.

The cursor lives in the snapshot during a cycle and in the scaling group's row between cycles
(the allocator writes it with the plan), so the order holds across cycles and managers."""

from __future__ import annotations

import bisect
from collections.abc import Callable

from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, ScalingGroupSnapshot
from sokovan.state.session_reads import SessionWithKernels


class RoundRobinSelector:
    name = "roundrobin"

    def __init__(self) -> None:
        self._ordered: list[AgentSnapshot] | None = None
        self._ids: list[str] = []

    def pick(
        self,
        session: SessionWithKernels,
        fits: Callable[[AgentSnapshot], bool],
        snapshot: ScalingGroupSnapshot,
    ) -> AgentSnapshot | None:
        if self._ordered is None:
            self._ordered = sorted(snapshot.agents, key=lambda a: a.id)
            self._ids = [a.id for a in self._ordered]
        n = len(self._ordered)
        start = (
            bisect.bisect_right(self._ids, snapshot.roundrobin_cursor) if snapshot.roundrobin_cursor else 0
        )
        for i in range(n):
            agent = self._ordered[(start + i) % n]
            if fits(agent):
                snapshot.roundrobin_cursor = agent.id
                return agent
        return None

    def taken(self, agent: AgentSnapshot) -> None:
        return None
