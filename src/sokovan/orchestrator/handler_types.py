"""The handler pattern (seed 000): handlers do work and say success / failure / skip; the
coordinator judges NEED_RETRY / EXPIRED / GIVE_UP and applies the handler's transition table.
"""

from __future__ import annotations

import abc
import datetime as dt
import enum
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import KernelStatus, SessionResult, SessionStatus


@dataclass(frozen=True)
class TransitionStatus:
    """Where an outcome takes the session and its kernels; None keeps that entity's status."""

    session: SessionStatus | None = None
    kernel: KernelStatus | None = None


@dataclass(frozen=True)
class StatusTransitions:
    """A handler's table; a None entry changes no status and only records history."""

    success: TransitionStatus | None = None
    need_retry: TransitionStatus | None = None
    expired: TransitionStatus | None = None
    give_up: TransitionStatus | None = None


@dataclass(frozen=True)
class KernelInfo:
    id: uuid.UUID
    status: KernelStatus
    agent_id: str | None
    agent_addr: str | None
    cluster_role: str
    cluster_idx: int
    occupied_slots: ResourceSlots
    exit_code: int | None
    status_info: dict[str, Any]


@dataclass(frozen=True)
class SessionWithKernels:
    id: uuid.UUID
    name: str
    access_key: str
    user_id: uuid.UUID
    project_id: uuid.UUID
    domain_name: str
    scaling_group: str
    pending_timeout: float
    type: str
    image: str
    command: str | None
    environ: dict[str, str]
    resources: ResourceSlots
    cluster_size: int
    cluster_mode: str
    priority: int
    status: SessionStatus
    status_info: dict[str, Any]
    status_changed_at: dt.datetime
    phase_attempts: int
    created_at: dt.datetime
    kernels: tuple[KernelInfo, ...]
    depends_on: tuple[uuid.UUID, ...] = ()

    @property
    def requested_slots(self) -> ResourceSlots:
        return self.resources.scaled(self.cluster_size)


@dataclass
class HandlerResult:
    """Per-session outcomes. A failure was attempted and failed (counts a try); a skip could
    not be attempted (no room, waiting) and only leaves a note — `skipped` maps id → reason."""

    successes: list[uuid.UUID] = field(default_factory=list)
    failures: dict[uuid.UUID, str] = field(default_factory=dict)
    skipped: dict[uuid.UUID, str] = field(default_factory=dict)
    # Extra status_info written with a success (e.g. why a session is terminating).
    success_info: dict[uuid.UUID, dict[str, Any]] = field(default_factory=dict)
    # Sessions that can never succeed in this phase (a failed dependency, a type no longer
    # allowed): the coordinator applies the give-up transition with this status_info (cause, message).
    rejected: dict[uuid.UUID, dict[str, Any]] = field(default_factory=dict)


class LifecycleHandler(abc.ABC):
    """Does the work of one stage for the sessions in its target statuses."""

    #: the key of this stage in the cluster config's per-phase timeouts and try limits
    phase: str

    @classmethod
    @abc.abstractmethod
    def name(cls) -> str: ...

    @property
    @abc.abstractmethod
    def target_session_statuses(self) -> frozenset[SessionStatus]: ...

    @property
    @abc.abstractmethod
    def target_kernel_statuses(self) -> frozenset[KernelStatus] | None:
        """Only sessions with a kernel in these statuses; None = no kernel filter."""

    @classmethod
    @abc.abstractmethod
    def status_transitions(cls) -> StatusTransitions: ...

    @abc.abstractmethod
    async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult: ...


class KernelMatchType(enum.Enum):
    ALL = "all"
    ANY = "any"
    NOT_ANY = "not_any"


class SessionPromotionHandler(abc.ABC):
    """Promotes a session when its kernels meet a condition; kernels are not changed.

    A session that waits in one of `expiring_statuses` longer than the timeout of `phase` is
    given up by the coordinator (start-up that expires for good ends the session).
    """

    expiring_statuses: frozenset[SessionStatus] = frozenset()
    phase: str = ""

    @classmethod
    @abc.abstractmethod
    def name(cls) -> str: ...

    @property
    @abc.abstractmethod
    def target_session_statuses(self) -> frozenset[SessionStatus]: ...

    @property
    @abc.abstractmethod
    def check_kernel_statuses(self) -> frozenset[KernelStatus]: ...

    @property
    @abc.abstractmethod
    def match_type(self) -> KernelMatchType: ...

    @classmethod
    @abc.abstractmethod
    def success_session_status(cls) -> SessionStatus: ...

    def outcome(
        self, session: SessionWithKernels
    ) -> tuple[SessionStatus, SessionResult | None, dict[str, Any] | None]:
        """Status, result and status_info a promoted session gets; handlers that decide the
        ending from the kernels (e.g. success or failure) override this."""
        return self.success_session_status(), None, None


def kernels_match(
    kernels: Sequence[KernelInfo], statuses: frozenset[KernelStatus], match: KernelMatchType
) -> bool:
    hits = [k.status in statuses for k in kernels]
    if match is KernelMatchType.ALL:
        return all(hits)
    if match is KernelMatchType.ANY:
        return any(hits)
    return not any(hits)
