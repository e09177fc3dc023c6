"""PENDING → SCHEDULED: place waiting sessions on agents through the provisioner.

It reads through the fair placement window (`placement_window`): a bounded share of each owner's
pending sessions per scaling group, and none blocked on a dependency that has not ended.

Preemption decisions of the plan are written in the same transaction as its placements
(`evictions.evict`: victims → TERMINATING, the preemptor nominated, all or nothing); after the
commit the victims' events are published, counted, and the lanes hinted (the end lane stops them).
A preemptor whose decision was written is not reported (its reason is written with it)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence

import structlog
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.bus.user_events import UserEvent, UserEventPublisher, publish
from sokovan.common.fair_share import FairShareConfig
from sokovan.common.foresight import iso
from sokovan.common.metrics import PREEMPTIONS, SESSION_TRANSITIONS
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import Phase
from sokovan.db.engine import autocommit
from sokovan.orchestrator.provisioner import registry
from sokovan.orchestrator.provisioner.allocator import RepositoryAllocator
from sokovan.orchestrator.provisioner.build import provisioner_for
from sokovan.orchestrator.provisioner.estimates import estimate
from sokovan.orchestrator.provisioner.foresight_reads import load_foresight
from sokovan.orchestrator.provisioner.loader import load_snapshots
from sokovan.orchestrator.provisioner.snapshot import Plan, ScalingGroupSnapshot
from sokovan.orchestrator.schedule.evictions import evict, lapse, preempted_events
from sokovan.orchestrator.schedule.handler import (
    KernelCondition,
    SessionHandler,
    SessionResultT,
    StatusTransitions,
    TransitionStatus,
)
from sokovan.state.session_reads import SessionWithKernels
from sokovan.state.status_info import SessionStatusInfo

log = structlog.get_logger(__name__)

# Start times are estimated at most this often (seconds): each estimate walks the group's agents
# for every waiting session, and a reader needs no fresher date than this.
LOOK_AHEAD_EVERY = 2.0


def foresight_info(plan: Plan) -> dict[uuid.UUID, SessionStatusInfo]:
    """What each waiting session of `plan` carries of its foresight (CONTRACT section 16)."""
    out: dict[uuid.UUID, SessionStatusInfo] = {}
    for sid, guess in plan.estimates.items():
        info: SessionStatusInfo = {"estimated_start_at": iso(guess.at), "estimate_reason": guess.reason}
        reservation = plan.reservations.get(sid)
        if reservation is not None:
            info["reservation"] = {"agents": list(reservation.agents), "at": iso(reservation.at)}
        out[sid] = info
    return out


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

    def __init__(
        self,
        engine: AsyncEngine,
        allocator: RepositoryAllocator | None = None,
        events: UserEventPublisher | None = None,
        wake: Callable[[], None] | None = None,
        fair_share: Callable[[], FairShareConfig] | None = None,
    ) -> None:
        self._engine = engine
        self._fair_share = fair_share or FairShareConfig  # the live settings of `fair_share` groups
        self._reads: AsyncEngine | None = None  # the snapshot's reads, at once (`load_snapshots`)
        self._allocator = allocator or RepositoryAllocator()
        self._events = events
        self._wake = wake or (lambda: None)
        self._looked_ahead = 0.0  # monotonic time of the last cycle that estimated start times

    async def _look_ahead(
        self, snapshots: list[ScalingGroupSnapshot], waiting: Sequence[SessionWithKernels]
    ) -> None:
        """The snapshots' occupants and learned run times (`foresight_reads`)."""
        assert self._reads is not None
        async with self._reads.connect() as conn:
            await load_foresight(conn, snapshots, {(s.access_key, s.image) for s in waiting})

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
        events: list[UserEvent] = []
        look_ahead = time.monotonic() - self._looked_ahead >= LOOK_AHEAD_EVERY
        if look_ahead:
            self._looked_ahead = time.monotonic()
        async with self._engine.begin() as conn:
            waiting = [s for group in by_sg.values() for s in group]
            self._reads = self._reads or autocommit(self._engine)
            snapshots = await load_snapshots(conn, waiting, reads=self._reads, fair_share=self._fair_share())
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
                if snapshot.queue_policy == "reserve":  # its reservation needs the timeline now
                    await self._look_ahead([snapshot], sessions)
                provisioner.estimate = False  # below, only on the cycles that look ahead
                plan = await provisioner.plan_cooperatively(sessions, snapshot)
                if look_ahead and any(w.for_room for w in plan.waiters):
                    if snapshot.queue_policy != "reserve":
                        await self._look_ahead([snapshot], sessions)
                    # a thread: a large group's estimates take a fraction of a second, which the
                    # API and the event consumer should not wait out
                    await asyncio.to_thread(estimate, snapshot, plan)
                    result.info.update(foresight_info(plan))
                committed, conflicts = await self._allocator.allocate(conn, plan, sg_name)
                result.successes.extend(committed)
                result.skipped.update(plan.waiting)
                result.skipped.update(conflicts)
                for sid, (cause, message) in plan.rejected.items():
                    result.rejected[sid] = {"cause": cause, "message": message}
                events += await self._preempt(conn, plan, snapshot, result)
        if events:
            victims = [e for e in events if e.name == "session.preempted"]
            PREEMPTIONS.inc(len(victims))
            SESSION_TRANSITIONS.labels(
                from_status=SessionStatus.RUNNING.value, to_status=SessionStatus.TERMINATING.value
            ).inc(len(victims))
            log.info("schedule.preempted", victims=len(victims))
            await publish(self._events, events)
            self._wake()
        return result

    async def _preempt(
        self, conn: AsyncConnection, plan: Plan, snapshot: ScalingGroupSnapshot, result: SessionResultT
    ) -> list[UserEvent]:
        """Write the plan's preemption decisions and lapses; the events to publish after commit."""
        events: list[UserEvent] = []
        for preemption in plan.preemptions:
            applied = await evict(conn, preemption, snapshot.preemption, snapshot.now, self.name)
            if applied is None:  # a victim moved on: no preemption this cycle, it waits as it was
                result.skipped[preemption.session_id] = plan.waiting_if_abandoned[preemption.session_id]
                continue
            events += [e for e in applied.events() if e.session_id != str(preemption.session_id)]
            events += preempted_events(preemption, applied)
        await lapse(conn, sorted(plan.lapsed), self.name)
        return events
