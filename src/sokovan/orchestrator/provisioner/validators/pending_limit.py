"""Only the oldest `max_pending_sessions` pending sessions of a keypair are considered for
placement; the rest wait their turn (creation already refuses going past the limit, so this
holds when a policy is tightened while sessions wait)."""

from __future__ import annotations

from sokovan.orchestrator.provisioner.reasons import over_pending_limit
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot
from sokovan.orchestrator.provisioner.stages import Verdict, Wait
from sokovan.state.session_reads import SessionWithKernels


class PendingLimitValidator:
    name = "pending_limit"

    def check(self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot) -> Verdict:
        policy = snapshot.tenancy.keypairs.get(session.access_key)
        cap = policy.max_pending_sessions if policy else None
        rank = snapshot.pending_rank.get(session.id, 1)
        if cap is not None and rank > cap:
            return Wait(over_pending_limit(cap))
        return None
