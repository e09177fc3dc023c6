"""First in, first out inside priority bands."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.orchestrator.handler_types import SessionWithKernels
from sokovan.orchestrator.provisioner.sequencers.bands import by_band
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot


class FIFOSequencer:
    name = "fifo"

    def sequence(
        self, sessions: Sequence[SessionWithKernels], snapshot: ScalingGroupSnapshot
    ) -> list[SessionWithKernels]:
        return by_band(sessions, lambda band: sorted(band, key=lambda s: (s.created_at, s.id)))
