"""TERMINATING → TERMINATED / ERROR once no kernel is left alive; the cause decides which."""

from __future__ import annotations

from typing import Any

from sokovan.common.types import KernelStatus, SessionResult, SessionStatus
from sokovan.orchestrator.handler_types import KernelMatchType, SessionPromotionHandler, SessionWithKernels
from sokovan.orchestrator.schedule.endings import final_status


class PromoteToTerminated(SessionPromotionHandler):
    @classmethod
    def name(cls) -> str:
        return "PromoteToTerminated"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        return frozenset({SessionStatus.TERMINATING})

    @property
    def check_kernel_statuses(self) -> frozenset[KernelStatus]:
        return KernelStatus.non_terminal()

    @property
    def match_type(self) -> KernelMatchType:
        return KernelMatchType.NOT_ANY

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        return SessionStatus.TERMINATED

    def outcome(
        self, session: SessionWithKernels
    ) -> tuple[SessionStatus, SessionResult | None, dict[str, Any] | None]:
        status, result = final_status(session.status_info)
        return status, result, None
