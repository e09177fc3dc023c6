"""Spreading: the agent with the most room left (by the group's resource priority), so that load
is even and one agent's loss hurts few sessions. Ties go to the smaller agent id."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.orchestrator.handler_types import SessionWithKernels
from sokovan.orchestrator.provisioner.selectors.scoring import free_room
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, ScalingGroupSnapshot


class DispersedSelector:
    name = "dispersed"

    def pick(
        self, session: SessionWithKernels, candidates: Sequence[AgentSnapshot], snapshot: ScalingGroupSnapshot
    ) -> AgentSnapshot:
        return min(
            candidates, key=lambda a: (tuple(-x for x in free_room(a, snapshot.resource_priority)), a.id)
        )
