"""RUNNING → TERMINATING as soon as any kernel has ended; a failed kernel's cause goes with it."""

from __future__ import annotations

from typing import Any

from sokovan.common.types import KernelStatus, SessionResult, SessionStatus
from sokovan.orchestrator.handler_types import KernelMatchType, SessionPromotionHandler, SessionWithKernels
from sokovan.orchestrator.schedule.endings import failure_from_kernels


class DetectTermination(SessionPromotionHandler):
    @classmethod
    def name(cls) -> str:
        return "DetectTermination"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        return frozenset({SessionStatus.RUNNING})

    @property
    def check_kernel_statuses(self) -> frozenset[KernelStatus]:
        return KernelStatus.terminal()

    @property
    def match_type(self) -> KernelMatchType:
        return KernelMatchType.ANY

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        return SessionStatus.TERMINATING

    def outcome(
        self, session: SessionWithKernels
    ) -> tuple[SessionStatus, SessionResult | None, dict[str, Any] | None]:
        return SessionStatus.TERMINATING, None, failure_from_kernels(session.kernels)
