"""Fair share inside priority bands, by Fair Tree levels (`common.fair_share`).

Sessions are ordered by their domain's factor, then their project's, then their user's (higher
first: the owner that used least of its share goes next), ties by creation. Factors are compared
rounded to two decimals, so owners whose past usage has all but decayed compare equal and fall
back to creation order instead of being told apart by a trace of usage long past.

The order is not charged as it goes (as DRF's is): usage is over time, and a session placed now
adds to its owner's usage from the next cycles on, while it runs. Without a view (none is read
for a dry run, which orders one session) every factor is 1: creation order.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence

from sokovan.common.fair_share import FairShareView
from sokovan.orchestrator.provisioner.sequencers.bands import by_band
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot
from sokovan.state.session_reads import SessionWithKernels

PLACES = 2  # factors equal to this many decimals compare equal

Key = tuple[float, float, float, dt.datetime, uuid.UUID]


class FairShareSequencer:
    name = "fair_share"

    def sequence(
        self, sessions: Sequence[SessionWithKernels], snapshot: ScalingGroupSnapshot
    ) -> list[SessionWithKernels]:
        view = snapshot.fair_share or FairShareView()
        ranks: dict[tuple[str, uuid.UUID, uuid.UUID], tuple[float, float, float]] = {}

        def key(s: SessionWithKernels) -> Key:
            owner = (s.domain_name, s.project_id, s.user_id)
            rank = ranks.get(owner)
            if rank is None:
                domain, project, user = view.factors(s.domain_name, str(s.project_id), str(s.user_id))
                rank = ranks[owner] = (-round(domain, PLACES), -round(project, PLACES), -round(user, PLACES))
            return (*rank, s.created_at, s.id)

        return by_band(sessions, lambda band: sorted(band, key=key))
