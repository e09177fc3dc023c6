"""First in, first out inside priority bands."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.orchestrator.provisioner.sequencers.bands import by_band
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot
from sokovan.state.session_reads import SessionWithKernels


class FIFOSequencer:
    name = "fifo"

    def sequence(
        self, sessions: Sequence[SessionWithKernels], snapshot: ScalingGroupSnapshot
    ) -> list[SessionWithKernels]:
        return by_band(sessions, lambda band: sorted(band, key=lambda s: (s.created_at, s.id)))
