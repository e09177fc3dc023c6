"""The scaling group must still allow the session's type (it may have changed since creation)."""

from __future__ import annotations

from sokovan.common.types import FailureCause
from sokovan.orchestrator.handler_types import SessionWithKernels
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot
from sokovan.orchestrator.provisioner.stages import Reject, Verdict


class SessionTypeValidator:
    name = "session_type"

    def check(self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot) -> Verdict:
        if session.type not in snapshot.allowed_session_types:
            allowed = ", ".join(sorted(snapshot.allowed_session_types)) or "none"
            return Reject(
                FailureCause.VALIDATION_ERROR.value,
                f"scaling group {snapshot.name!r} no longer allows {session.type} sessions"
                f" (allows: {allowed})",
            )
        return None
