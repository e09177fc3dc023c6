"""PENDING → SCHEDULED: place waiting sessions on agents through the provisioner.

It reads through the fair placement window (`placement_window`): a bounded share of each owner's
pending sessions per scaling group, and none blocked on a dependency that has not ended."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import Phase
from sokovan.orchestrator.provisioner import registry
from sokovan.orchestrator.provisioner.allocator import RepositoryAllocator
from sokovan.orchestrator.provisioner.build import provisioner_for
from sokovan.orchestrator.provisioner.loader import load_snapshots
from sokovan.orchestrator.schedule.handler import (
    KernelCondition,
    SessionHandler,
    SessionResultT,
    StatusTransitions,
    TransitionStatus,
)
from sokovan.state.session_reads import SessionWithKernels

log = structlog.get_logger(__name__)


class ScheduleNewSessions(SessionHandler):
    targets = frozenset({SessionStatus.PENDING})
    kernels = KernelCondition(frozenset({KernelStatus.PENDING}))
    phase = Phase.SCHEDULE
    placement_window = True
    transitions = StatusTransitions(
        success=TransitionStatus(SessionStatus.SCHEDULED, KernelStatus.SCHEDULED),
        need_retry=None,
        expired=TransitionStatus(SessionStatus.CANCELLED, KernelStatus.CANCELLED),
        give_up=TransitionStatus(SessionStatus.CANCELLED, KernelStatus.CANCELLED),
    )

    def __init__(self, engine: AsyncEngine, allocator: RepositoryAllocator | None = None) -> None:
        self._engine = engine
        self._allocator = allocator or RepositoryAllocator()

    async def execute(self, targets: Sequence[SessionWithKernels]) -> SessionResultT:
        result = SessionResultT()
        by_sg: dict[str, list[SessionWithKernels]] = defaultdict(list)
        for session in targets:
            if session.kernels and all(k.agent_id is not None for k in session.kernels):
                result.successes.append(session.id)  # placed by an earlier cycle that did not finish
            else:
                by_sg[session.scaling_group].append(session)
        if not by_sg:
            return result
        async with self._engine.begin() as conn:
            snapshots = await load_snapshots(conn, [s for group in by_sg.values() for s in group])
            for sg_name, sessions in by_sg.items():
                snapshot = snapshots.get(sg_name)
                if snapshot is None:
                    result.skipped.update(
                        {s.id: f"scaling group {sg_name!r} does not exist" for s in sessions}
                    )
                    continue
                try:
                    provisioner = provisioner_for(snapshot)
                except registry.UnknownStage as exc:
                    log.error("schedule.misconfigured_scaling_group", scaling_group=sg_name, error=str(exc))
                    result.skipped.update({s.id: f"scaling group misconfigured: {exc}" for s in sessions})
                    continue
                plan = provisioner.plan(sessions, snapshot)
                committed, conflicts = await self._allocator.allocate(conn, plan, sg_name)
                result.successes.extend(committed)
                result.skipped.update(plan.waiting)
                result.skipped.update(conflicts)
                for sid, (cause, message) in plan.rejected.items():
                    result.rejected[sid] = {"cause": cause, "message": message}
        return result
