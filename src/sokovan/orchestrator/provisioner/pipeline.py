"""Placement, pure over a snapshot: validators → sequencer → filter + selector → plan.

Every rejection is data: an agent that cannot take a session says why, and the reasons are
summed into the session's pending_reason ("0/3 agents fit: 2 insufficient cpu, 1 not READY").
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus, ClusterMode
from sokovan.orchestrator.handler_types import SessionWithKernels
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, Placement, Plan, ScalingGroupSnapshot
from sokovan.orchestrator.provisioner.stages import Selector, Sequencer, Validator


def why_not(agent: AgentSnapshot, image: str, slots: ResourceSlots, kernels: int) -> str | None:
    """None when `agent` can take `kernels` kernels needing `slots` in all, else the reason."""
    if agent.status != AgentStatus.READY:
        return f"not {AgentStatus.READY.value}"
    if not agent.schedulable:
        return "not schedulable"
    if image not in agent.images:
        return "image not offered"
    if agent.max_kernels is not None and agent.kernel_count + kernels > agent.max_kernels:
        return "at kernel limit"
    short = slots.shortfall(agent.free)
    if short:
        return f"insufficient {short[0]}"
    return None


def summarize(total: int, fits: int, reasons: Counter[str]) -> str:
    parts = ", ".join(
        f"{n} {reason}" for reason, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    return f"{fits}/{total} agents fit" + (f": {parts}" if parts else "")


@dataclass
class Provisioner:
    validators: Sequence[Validator]
    sequencer: Sequencer
    selector: Selector

    def plan(self, sessions: Sequence[SessionWithKernels], snapshot: ScalingGroupSnapshot) -> Plan:
        plan = Plan()
        for session in self.sequencer.sequence(sessions, snapshot):
            reason = self._validate(session, snapshot)
            if reason is None:
                placement, reason = self._place(session, snapshot)
                if placement is not None:
                    plan.placements.append(placement)
                    snapshot.active_sessions[session.access_key] += 1
                    continue
            plan.waiting[session.id] = reason or "waiting"
        return plan

    def _validate(self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot) -> str | None:
        for validator in self.validators:
            reason = validator.check(session, snapshot)
            if reason is not None:
                return reason
        return None

    def _place(
        self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot
    ) -> tuple[Placement | None, str | None]:
        kernels = [k.id for k in session.kernels]
        per_kernel = session.resources
        if session.cluster_mode == ClusterMode.MULTI_NODE and len(kernels) > 1:
            return self._place_spread(session, snapshot, kernels)
        whole = per_kernel.scaled(len(kernels))
        candidates, reasons = self._filter(snapshot.agents, session.image, whole, len(kernels))
        if not candidates:
            return None, summarize(len(snapshot.agents), 0, reasons)
        agent = self.selector.pick(session, candidates)
        agent.take(whole, len(kernels))
        return Placement(session.id, dict.fromkeys(kernels, agent.id), per_kernel), None

    def _place_spread(
        self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot, kernels: Sequence[uuid.UUID]
    ) -> tuple[Placement | None, str | None]:
        """Each kernel on a different agent; all or nothing."""
        candidates, reasons = self._filter(snapshot.agents, session.image, session.resources, 1)
        if len(candidates) < len(kernels):
            detail = summarize(len(snapshot.agents), len(candidates), reasons)
            return None, f"multi-node needs {len(kernels)} agents: {detail}"
        chosen: list[AgentSnapshot] = []
        remaining = list(candidates)
        for _ in kernels:
            agent = self.selector.pick(session, remaining)
            remaining.remove(agent)
            chosen.append(agent)
        for agent in chosen:
            agent.take(session.resources, 1)
        mapping = {k.id: a.id for k, a in zip(session.kernels, chosen, strict=True)}
        return Placement(session.id, mapping, session.resources), None

    @staticmethod
    def _filter(
        agents: Sequence[AgentSnapshot], image: str, slots: ResourceSlots, kernels: int
    ) -> tuple[list[AgentSnapshot], Counter[str]]:
        fits: list[AgentSnapshot] = []
        reasons: Counter[str] = Counter()
        for agent in agents:
            reason = why_not(agent, image, slots, kernels)
            if reason is None:
                fits.append(agent)
            else:
                reasons[reason] += 1
        return fits, reasons
