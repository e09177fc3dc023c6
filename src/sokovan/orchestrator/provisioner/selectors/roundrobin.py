"""Round-robin over the agents in id order: the next candidate after the last one picked.

The cursor lives in the snapshot during a cycle and in the scaling group's row between cycles
(the allocator writes it with the plan), so the order holds across cycles and managers."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.orchestrator.handler_types import SessionWithKernels
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, ScalingGroupSnapshot


class RoundRobinSelector:
    name = "roundrobin"

    def pick(
        self, session: SessionWithKernels, candidates: Sequence[AgentSnapshot], snapshot: ScalingGroupSnapshot
    ) -> AgentSnapshot:
        ordered = sorted(candidates, key=lambda a: a.id)
        cursor = snapshot.roundrobin_cursor
        chosen = next((a for a in ordered if cursor is None or a.id > cursor), ordered[0])
        snapshot.roundrobin_cursor = chosen.id
        return chosen
