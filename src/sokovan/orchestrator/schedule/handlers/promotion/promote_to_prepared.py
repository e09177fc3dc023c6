"""SCHEDULED/PREPARING → PREPARED once no kernel is still waiting for its image."""

from __future__ import annotations

from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.orchestrator.handler_types import KernelMatchType, SessionPromotionHandler

K = KernelStatus


class PromoteToPrepared(SessionPromotionHandler):
    #: a session that stays in these statuses longer than the phase's timeout is given up
    expiring_statuses = frozenset({SessionStatus.PREPARING})
    phase = "pulling"

    @classmethod
    def name(cls) -> str:
        return "PromoteToPrepared"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        return frozenset({SessionStatus.SCHEDULED, SessionStatus.PREPARING})

    @property
    def check_kernel_statuses(self) -> frozenset[KernelStatus]:
        return frozenset({K.PENDING, K.SCHEDULED, K.PREPARING, K.PULLING})

    @property
    def match_type(self) -> KernelMatchType:
        return KernelMatchType.NOT_ANY

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        return SessionStatus.PREPARED
