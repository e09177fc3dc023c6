"""The in-memory picture placement works on: one scaling group's agents and the owners' usage.

Planning is pure over this snapshot; each placement updates it so that the next session in the
same cycle sees the room the previous one took.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus


@dataclass
class AgentSnapshot:
    id: str
    status: AgentStatus
    schedulable: bool
    available: ResourceSlots
    occupied: ResourceSlots
    kernel_count: int
    max_kernels: int | None
    images: frozenset[str]

    @property
    def free(self) -> ResourceSlots:
        return self.available - self.occupied

    def take(self, slots: ResourceSlots, kernels: int) -> None:
        self.occupied = self.occupied + slots
        self.kernel_count += kernels


@dataclass(frozen=True)
class KeypairLimits:
    max_concurrent_sessions: int | None = None


@dataclass
class ScalingGroupSnapshot:
    name: str
    scheduler: str
    agent_selection: str
    agents: list[AgentSnapshot]
    limits: dict[str, KeypairLimits] = field(default_factory=dict)
    # non-terminal sessions already placed (not PENDING), per access key
    active_sessions: Counter[str] = field(default_factory=Counter)


@dataclass
class Placement:
    session_id: uuid.UUID
    # kernel id → agent id
    kernels: dict[uuid.UUID, str]
    slots_per_kernel: ResourceSlots


@dataclass
class Plan:
    placements: list[Placement] = field(default_factory=list)
    # session id → why it waits
    waiting: dict[uuid.UUID, str] = field(default_factory=dict)
