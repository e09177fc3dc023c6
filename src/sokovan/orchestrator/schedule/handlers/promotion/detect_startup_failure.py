"""A session still starting whose kernel failed (image not to be had, creation failed, exited
early with an error) goes TERMINATING, so that its other kernels are destroyed and it ends ERROR."""

from __future__ import annotations

from typing import Any

from sokovan.common.types import KernelStatus, SessionResult, SessionStatus
from sokovan.orchestrator.handler_types import KernelMatchType, SessionPromotionHandler, SessionWithKernels
from sokovan.orchestrator.schedule.endings import failure_from_kernels

S = SessionStatus


class DetectStartupFailure(SessionPromotionHandler):
    @classmethod
    def name(cls) -> str:
        return "DetectStartupFailure"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        return frozenset({S.SCHEDULED, S.PREPARING, S.PULLING, S.PREPARED, S.CREATING})

    @property
    def check_kernel_statuses(self) -> frozenset[KernelStatus]:
        return frozenset({KernelStatus.ERROR, KernelStatus.CANCELLED})

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
