"""Usage of placed sessions + the request must stay within every defined quota: the keypair's
policy, the project and the domain. Every violated scope is named."""

from __future__ import annotations

from sokovan.orchestrator.provisioner.reasons import quota_exceeded, quota_violation
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot
from sokovan.orchestrator.provisioner.stages import Verdict, Wait
from sokovan.state.session_reads import SessionWithKernels


class QuotaValidator:
    name = "quota"

    def check(self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot) -> Verdict:
        t = snapshot.tenancy
        request = session.requested_slots
        policy = t.keypairs.get(session.access_key)
        scopes = [
            (policy.quota if policy else None, t.keypair_usage[session.access_key]),
            (t.project_quotas.get(session.project_id), t.project_usage[session.project_id]),
            (t.domain_quotas.get(session.domain_name), t.domain_usage[session.domain_name]),
        ]
        violations = []
        for quota, used in scopes:
            if quota is None:
                continue
            excess = quota.excess(used, request)
            if excess:
                violations.append(quota_violation(quota.scope, excess))
        if violations:
            return Wait(quota_exceeded(violations))
        return None
