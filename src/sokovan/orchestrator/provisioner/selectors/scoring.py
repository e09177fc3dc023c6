"""What selectors compare agents by: free room, slot by slot in the group's resource priority."""

from __future__ import annotations

from decimal import Decimal

from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot


def free_room(agent: AgentSnapshot, priority: tuple[str, ...]) -> tuple[Decimal, ...]:
    free = agent.free
    return tuple(free.get(slot, Decimal(0)) for slot in priority)
