"""CREATING → RUNNING once every kernel has started (none is still on its way).

PREPARED is a target too: a manager that died after asking agents to start the kernels but before
recording CREATING leaves the session PREPARED with running kernels, and it must not stay there.
A PREPARED session whose kernels have not been started does not match (they are PREPARED)."""

from __future__ import annotations

from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.orchestrator.handler_types import KernelMatchType, SessionPromotionHandler

K = KernelStatus


class PromoteToRunning(SessionPromotionHandler):
    expiring_statuses = frozenset({SessionStatus.CREATING})
    phase = "creating"

    @classmethod
    def name(cls) -> str:
        return "PromoteToRunning"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        return frozenset({SessionStatus.PREPARED, SessionStatus.CREATING})

    @property
    def check_kernel_statuses(self) -> frozenset[KernelStatus]:
        return frozenset({K.PENDING, K.SCHEDULED, K.PREPARING, K.PULLING, K.PREPARED, K.CREATING})

    @property
    def match_type(self) -> KernelMatchType:
        return KernelMatchType.NOT_ANY

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        return SessionStatus.RUNNING
