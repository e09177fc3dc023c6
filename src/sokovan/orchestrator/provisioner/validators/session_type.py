"""The scaling group must still allow the session's type (it may have changed since creation)."""

from __future__ import annotations

from sokovan.common.types import FailureCause
from sokovan.orchestrator.provisioner.reasons import type_not_allowed
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot
from sokovan.orchestrator.provisioner.stages import Reject, Verdict
from sokovan.state.session_reads import SessionWithKernels


class SessionTypeValidator:
    name = "session_type"

    def check(self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot) -> Verdict:
        if session.type not in snapshot.allowed_session_types:
            return Reject(
                FailureCause.VALIDATION_ERROR.value,
                type_not_allowed(snapshot.name, session.type, snapshot.allowed_session_types),
            )
        return None
