"""Bin-packing: the agent with the least room left (by the group's resource priority), so that
whole agents stay free for big sessions. Ties go to the smaller agent id."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.orchestrator.handler_types import SessionWithKernels
from sokovan.orchestrator.provisioner.selectors.scoring import free_room
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, ScalingGroupSnapshot


class ConcentratedSelector:
    name = "concentrated"

    def pick(
        self, session: SessionWithKernels, candidates: Sequence[AgentSnapshot], snapshot: ScalingGroupSnapshot
    ) -> AgentSnapshot:
        return min(candidates, key=lambda a: (free_room(a, snapshot.resource_priority), a.id))
