"""Last in, first out inside priority bands: the newest request is served first."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.orchestrator.provisioner.sequencers.bands import by_band
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot
from sokovan.state.session_reads import SessionWithKernels


class LIFOSequencer:
    name = "lifo"

    def sequence(
        self, sessions: Sequence[SessionWithKernels], snapshot: ScalingGroupSnapshot
    ) -> list[SessionWithKernels]:
        return by_band(sessions, lambda band: sorted(band, key=lambda s: (s.created_at, s.id), reverse=True))
