"""How a session ends, decided in one place from the cause it carries (the contract's
rule: no cause is a success, the user's request or a preemption is no failure, any other cause
is one)."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.common.types import FailureCause, KernelStatus, SessionResult, SessionStatus
from sokovan.state.session_reads import KernelInfo
from sokovan.state.status_info import SessionStatusInfo


def final_status(status_info: SessionStatusInfo) -> tuple[SessionStatus, SessionResult | None]:
    """No cause → TERMINATED/SUCCESS; a user's request or a preemption → TERMINATED with no
    result; any other cause → ERROR/FAILURE."""
    cause = status_info.get("cause")
    if cause is None:
        return SessionStatus.TERMINATED, SessionResult.SUCCESS
    if cause in (FailureCause.USER_CANCELLED, FailureCause.PREEMPTED):
        return SessionStatus.TERMINATED, None
    return SessionStatus.ERROR, SessionResult.FAILURE


def cancelled_result(status_info: SessionStatusInfo) -> SessionResult | None:
    return None if status_info.get("cause") == FailureCause.USER_CANCELLED else SessionResult.FAILURE


def failure_from_kernels(kernels: Sequence[KernelInfo]) -> SessionStatusInfo | None:
    """The status_info of the first kernel that failed, or None when none did."""
    for kernel in kernels:
        if kernel.status in (KernelStatus.ERROR, KernelStatus.CANCELLED):
            cause = kernel.status_info.get("cause", FailureCause.UNKNOWN.value)
            message = kernel.status_info.get("message") or f"kernel {kernel.id} failed"
            info: SessionStatusInfo = {"cause": cause, "message": message, "failed_kernel": str(kernel.id)}
            if kernel.exit_code is not None:
                info["exit_code"] = kernel.exit_code
            return info
    return None
