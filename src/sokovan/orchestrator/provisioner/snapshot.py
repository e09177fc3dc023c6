"""The in-memory picture placement works on.

A `ScalingGroupSnapshot` holds one group's agents and settings; the `Tenancy` it points to is
shared by every group of the cycle (quotas are cluster-wide). Planning is pure over these; each
placement is charged to them so that the next session of the same cycle sees what it took.

Preemption adds three things: the group's RUNNING preemptible sessions (`candidates`, read only
when its mode is not off), the nominations in force (`nominations`), and on each agent the room
held for a nominee (`AgentSnapshot.held`): a session of lower or equal priority than a nominee
sees that room as taken. A hold counts only the part of the nominee's need that its victims do
not still occupy (their live kernels already fill it), so nothing is counted twice.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from sokovan.common.fair_share import FairShareView
from sokovan.common.image_refs import offers
from sokovan.common.preemption import PreemptionSettings
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus
from sokovan.orchestrator.provisioner.timeline_memo import TimelineMemo
from sokovan.state.quota import Quota
from sokovan.state.session_reads import SessionWithKernels


@dataclass(slots=True)
class AgentSnapshot:
    # A placement cycle builds one per agent of its groups (a thousand): slotted, built
    # positionally, with `NOTHING` for the agents that hold nothing.
    id: str
    status: AgentStatus
    schedulable: bool
    available: ResourceSlots
    occupied: ResourceSlots
    kernel_count: int
    max_kernels: int | None
    images: frozenset[str]
    free: ResourceSlots = field(init=False)
    # room held for nominated preemptors (see the module's docstring)
    held: list[Hold] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Most agents of a large cluster hold nothing at a given cycle: their free room is their
        # capacity itself (slots are never changed in place, only replaced), not a copy of it.
        self.free = self.available - self.occupied if self.occupied else self.available

    def take(self, slots: ResourceSlots, kernels: int) -> None:
        self.occupied = self.occupied + slots
        self.free = self.available - self.occupied
        self.kernel_count += kernels

    def room_for(
        self,
        priority: int | None,
        session_id: uuid.UUID | None,
        ends_by: dt.datetime | None = None,
        reserved: bool = True,
    ) -> tuple[ResourceSlots, int]:
        """(free slots, kernel count) as a session of `priority` sees them: the room held for
        nominees and reservations of higher or equal priority (other than itself) is not free to
        it, unless it is a reservation's and the session ends (`ends_by`) before that is needed.
        Without `reserved`, reservations' holds do not count (the timeline books them instead)."""
        if not self.held or priority is None:
            return self.free, self.kernel_count
        free, count = self.free, self.kernel_count
        for hold in self.held:
            if hold.priority >= priority and hold.session_id != session_id:
                if hold.reserved and not reserved:
                    continue
                if hold.until is not None and ends_by is not None and ends_by <= hold.until:
                    continue
                free = free - hold.slots
                count += hold.kernels
        return free, count

    def release(self, session_id: uuid.UUID) -> None:
        """The nominee was placed: its own kernels now hold what was held for it."""
        self.held = [h for h in self.held if h.session_id != session_id]

    def can_take(
        self,
        image: str,
        slots: ResourceSlots,
        kernels: int,
        priority: int | None = None,
        session_id: uuid.UUID | None = None,
        ends_by: dt.datetime | None = None,
    ) -> bool:
        """The fast yes/no of `pipeline.why_not` (same rules, no reason)."""
        if self.status != AgentStatus.READY or not self.schedulable:
            return False
        if image not in self.images and not offers(self.images, image):  # the common yes inline
            return False
        free, count = self.room_for(priority, session_id, ends_by)
        if self.max_kernels is not None and count + kernels > self.max_kernels:
            return False
        return all(amount <= 0 or amount <= free.get(name, _ZERO) for name, amount in slots.items())


@dataclass(frozen=True)
class Hold:
    """Room on one agent held for `session_id` of `priority`: a nominated preemptor's, or (with
    `until`) a reservation's, which a session that ends by `until` may use meanwhile. Preemption
    and `reserve` hold room by this one mechanism."""

    session_id: uuid.UUID
    priority: int
    slots: ResourceSlots
    kernels: int
    until: dt.datetime | None = None
    reserved: bool = False  # a reservation's (else a nominated preemptor's)


@dataclass(frozen=True)
class VictimKernel:
    agent_id: str
    slots: ResourceSlots


@dataclass(frozen=True)
class Candidate:
    """A RUNNING session of the group that preemption might evict, and where its kernels hold room."""

    id: uuid.UUID
    priority: int
    preemptible: bool
    created_at: dt.datetime
    kernels: tuple[VictimKernel, ...]


@dataclass(frozen=True)
class Nomination:
    """A preemptor's nomination in force: its agents (one per kernel, in cluster order) and its victims."""

    session_id: uuid.UUID
    priority: int
    agents: tuple[str, ...]
    victims: tuple[uuid.UUID, ...]


@dataclass(frozen=True, slots=True)
class Occupant:
    """A live session's kernels on one agent and when they are expected to end: at its start plus
    its `max_duration`, else its learned run time; None when nothing bounds it (scheduler
    foresight: the `reserve` queue policy and the start-time estimates, `timeline`)."""

    session_id: uuid.UUID
    agent_id: str
    slots: ResourceSlots
    kernels: int
    ends_at: dt.datetime | None


_ZERO = Decimal(0)
# What an agent without live kernels occupies: shared, as slots are never changed in place.
NOTHING = ResourceSlots()


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
    # preemption: the group's settings, its RUNNING sessions (read when the mode is not off), the
    # nominations in force (nominee id → nomination), the victims chosen during this plan
    preemption: PreemptionSettings = field(default_factory=PreemptionSettings)
    candidates: list[Candidate] = field(default_factory=list)
    nominations: dict[uuid.UUID, Nomination] = field(default_factory=dict)
    taken: set[uuid.UUID] = field(default_factory=set)
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    # foresight: the live sessions' kernels per agent with their expected ends, and the learned
    # run time (seconds) of a session by its (access key, image): the median of their ended ones
    occupants: list[Occupant] = field(default_factory=list)
    learned: dict[tuple[str, str], float] = field(default_factory=dict)
    # fair share: the cluster's decayed usage per domain, project and user (read only when the
    # group's scheduler is `fair_share`; `common.fair_share`)
    fair_share: FairShareView | None = None
    # kept between plans by a caller that plans the same agents again and again (the simulator)
    timeline_memo: TimelineMemo | None = None

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


@dataclass(frozen=True)
class Preemption:
    """A preemptor, the victims whose release makes it fit, and its agents (one per kernel)."""

    session_id: uuid.UUID
    priority: int
    victims: tuple[uuid.UUID, ...]
    agents: tuple[str, ...]
    # victim id → the agents where it frees room for the preemptor (for its event)
    victim_agents: dict[uuid.UUID, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Reservation:
    """Under `reserve`: the agents (one per kernel) and the time the first session that does not
    fit is expected to have room there (None: nothing bounds it); later sessions may not take
    what it needs by then."""

    session_id: uuid.UUID
    agents: tuple[str, ...]
    at: dt.datetime | None


@dataclass(frozen=True)
class Waiter:
    """A session a plan left waiting: for room (behind `behind` under `block`), or for a validator."""

    session: SessionWithKernels
    for_room: bool
    behind: uuid.UUID | None


@dataclass(frozen=True)
class Estimate:
    """When a waiting session is expected to start (None: nothing bounds it), and why."""

    at: dt.datetime | None
    reason: str


@dataclass
class Plan:
    placements: list[Placement] = field(default_factory=list)
    # sessions that fit only by evicting lower-priority ones: they stay PENDING, nominated
    preemptions: list[Preemption] = field(default_factory=list)
    # sessions whose nomination lapsed (its keys are to be cleared)
    lapsed: set[uuid.UUID] = field(default_factory=set)
    # a preemptor's reason to wait should its eviction be abandoned (a victim moved on meanwhile)
    waiting_if_abandoned: dict[uuid.UUID, str] = field(default_factory=dict)
    # session id → why it waits
    waiting: dict[uuid.UUID, str] = field(default_factory=dict)
    # session id → (cause, message): it can never be placed
    rejected: dict[uuid.UUID, tuple[str, str]] = field(default_factory=dict)
    # the round-robin cursor after this plan, when the group uses round-robin
    roundrobin_cursor: str | None = None
    # foresight: the reservation made under `reserve`, and every waiting session's estimate
    reservations: dict[uuid.UUID, Reservation] = field(default_factory=dict)
    estimates: dict[uuid.UUID, Estimate] = field(default_factory=dict)
    # what the estimates start from: the waiting sessions in the sequencer's order, and the
    # sessions placed by this plan with their agents (one per kernel)
    waiters: list[Waiter] = field(default_factory=list)
    placed: list[tuple[SessionWithKernels, tuple[str, ...]]] = field(default_factory=list)
