"""A session runs after every session it depends on ended TERMINATED / SUCCESS; if one of them
ended any other way, it never will, and is cancelled with DEPENDENCY_FAILED."""

from __future__ import annotations

import uuid

from sokovan.common.types import FailureCause, SessionResult, SessionStatus
from sokovan.orchestrator.provisioner.reasons import (
    MISSING_DEPENDENCY,
    dependency_ended,
    waiting_for_dependencies,
)
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot
from sokovan.orchestrator.provisioner.stages import Reject, Verdict, Wait
from sokovan.state.session_reads import SessionWithKernels

_TERMINAL = {s.value for s in SessionStatus.terminal()}


class DependencyValidator:
    name = "dependencies"

    def check(self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot) -> Verdict:
        waiting: list[tuple[uuid.UUID, str]] = []
        for dep in session.depends_on:
            status, result = snapshot.tenancy.dependencies.get(dep, (MISSING_DEPENDENCY, None))
            if status == SessionStatus.TERMINATED and result == SessionResult.SUCCESS:
                continue
            if status in _TERMINAL or status == MISSING_DEPENDENCY:
                return Reject(FailureCause.DEPENDENCY_FAILED.value, dependency_ended(dep, status, result))
            waiting.append((dep, status))
        if waiting:
            return Wait(waiting_for_dependencies(waiting))
        return None
