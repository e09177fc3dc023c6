"""Bin-packing: the agent with the least room left, so that whole agents stay free."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from sokovan.orchestrator.handler_types import SessionWithKernels
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot

RESOURCE_PRIORITY = ("cuda.device", "cpu", "mem")


class ConcentratedSelector:
    name = "concentrated"

    def __init__(self, priority: Sequence[str] = RESOURCE_PRIORITY) -> None:
        self._priority = tuple(priority)

    def pick(self, session: SessionWithKernels, candidates: Sequence[AgentSnapshot]) -> AgentSnapshot:
        def key(agent: AgentSnapshot) -> tuple[object, ...]:
            free = agent.free
            return (*(free.get(slot, Decimal(0)) for slot in self._priority), agent.id)

        return min(candidates, key=key)
