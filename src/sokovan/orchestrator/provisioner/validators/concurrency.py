"""A keypair may not run more than its policy's `max_concurrent_sessions` at once."""

from __future__ import annotations

from sokovan.orchestrator.provisioner.reasons import at_concurrency_limit
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot
from sokovan.orchestrator.provisioner.stages import Verdict, Wait
from sokovan.state.session_reads import SessionWithKernels


class ConcurrencyValidator:
    name = "concurrency"

    def check(self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot) -> Verdict:
        policy = snapshot.tenancy.keypairs.get(session.access_key)
        cap = policy.max_concurrent_sessions if policy else None
        if cap is None:
            return None
        running = snapshot.tenancy.active_sessions[session.access_key]
        if running >= cap:
            return Wait(at_concurrency_limit(running, cap))
        return None
