"""A keypair may not run more than its policy's `max_concurrent_sessions` at once."""

from __future__ import annotations

from sokovan.orchestrator.handler_types import SessionWithKernels
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot


class ConcurrencyValidator:
    name = "concurrency"

    def check(self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot) -> str | None:
        limits = snapshot.limits.get(session.access_key)
        cap = limits.max_concurrent_sessions if limits else None
        if cap is None:
            return None
        running = snapshot.active_sessions[session.access_key]
        if running >= cap:
            return f"keypair at its concurrency limit ({running}/{cap} sessions)"
        return None
