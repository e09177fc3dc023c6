"""The in-memory picture placement works on.

A `ScalingGroupSnapshot` holds one group's agents and settings; the `Tenancy` it points to is
shared by every group of the cycle (quotas are cluster-wide). Planning is pure over these; each
placement is charged to them so that the next session of the same cycle sees what it took.
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus
from sokovan.state.quota import Quota
from sokovan.state.session_reads import SessionWithKernels


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
    free: ResourceSlots = field(init=False)

    def __post_init__(self) -> None:
        self.free = self.available - self.occupied

    def take(self, slots: ResourceSlots, kernels: int) -> None:
        self.occupied = self.occupied + slots
        self.free = self.available - self.occupied
        self.kernel_count += kernels

    def can_take(self, image: str, slots: ResourceSlots, kernels: int) -> bool:
        """The fast yes/no of `pipeline.why_not` (same rules, no reason)."""
        if self.status != AgentStatus.READY or not self.schedulable or image not in self.images:
            return False
        if self.max_kernels is not None and self.kernel_count + kernels > self.max_kernels:
            return False
        free = self.free
        return all(amount <= 0 or amount <= free.get(name, _ZERO) for name, amount in slots.items())


_ZERO = Decimal(0)


@dataclass(frozen=True)
class KeypairPolicy:
    name: str | None = None
    quota: Quota | None = None
    max_concurrent_sessions: int | None = None
    max_pending_sessions: int | None = None


@dataclass
class Tenancy:
    """Owners' limits and what they already use, cluster-wide."""

    keypairs: dict[str, KeypairPolicy] = field(default_factory=dict)
    project_quotas: dict[uuid.UUID, Quota] = field(default_factory=dict)
    domain_quotas: dict[str, Quota] = field(default_factory=dict)
    keypair_usage: dict[str, ResourceSlots] = field(default_factory=lambda: defaultdict(ResourceSlots))
    project_usage: dict[uuid.UUID, ResourceSlots] = field(default_factory=lambda: defaultdict(ResourceSlots))
    domain_usage: dict[str, ResourceSlots] = field(default_factory=lambda: defaultdict(ResourceSlots))
    # non-terminal sessions already placed (not PENDING), per access key
    active_sessions: Counter[str] = field(default_factory=Counter)
    # (status, result) of every session some pending session depends on
    dependencies: dict[uuid.UUID, tuple[str, str | None]] = field(default_factory=dict)

    def charge(self, session: SessionWithKernels) -> None:
        slots = session.requested_slots
        self.keypair_usage[session.access_key] = self.keypair_usage[session.access_key] + slots
        self.project_usage[session.project_id] = self.project_usage[session.project_id] + slots
        self.domain_usage[session.domain_name] = self.domain_usage[session.domain_name] + slots
        self.active_sessions[session.access_key] += 1


@dataclass
class ScalingGroupSnapshot:
    name: str
    scheduler: str
    agent_selection: str
    agents: list[AgentSnapshot]
    queue_policy: str = "backfill"
    resource_priority: tuple[str, ...] = ("cuda.device", "cpu", "mem")
    allowed_session_types: frozenset[str] = frozenset({"batch", "interactive", "inference"})
    roundrobin_cursor: str | None = None
    tenancy: Tenancy = field(default_factory=Tenancy)
    # slots each user holds in this group (DRF's allocation)
    user_allocated: dict[uuid.UUID, ResourceSlots] = field(default_factory=lambda: defaultdict(ResourceSlots))
    # 1-based position of each pending session among its keypair's pending sessions, oldest first
    pending_rank: dict[uuid.UUID, int] = field(default_factory=dict)

    @property
    def capacity(self) -> ResourceSlots:
        return ResourceSlots.total(a.available for a in self.agents)

    def charge(self, session: SessionWithKernels) -> None:
        self.tenancy.charge(session)
        self.user_allocated[session.user_id] = self.user_allocated[session.user_id] + session.requested_slots


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
    # session id → (cause, message): it can never be placed
    rejected: dict[uuid.UUID, tuple[str, str]] = field(default_factory=dict)
    # the round-robin cursor after this plan, when the group uses round-robin
    roundrobin_cursor: str | None = None
