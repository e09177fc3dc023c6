"""First in, first out inside priority bands (higher priority first)."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.orchestrator.handler_types import SessionWithKernels
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot


class FIFOSequencer:
    name = "fifo"

    def sequence(
        self, sessions: Sequence[SessionWithKernels], snapshot: ScalingGroupSnapshot
    ) -> list[SessionWithKernels]:
        return sorted(sessions, key=lambda s: (-s.priority, s.created_at, s.id))
