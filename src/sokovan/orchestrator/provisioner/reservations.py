"""One plan's reservations under the `reserve` queue policy: the first sessions that do not fit
(up to `RESERVE_DEPTH`) each get the agents and time their room will be there, on the plan's
timeline (`timeline.Timeline`, built at the first one), held against later sessions
(`estimates.reserve_for`).

A reservation changes a plan only through the room it holds: a later session that fits now may
not take it. A caller that reads nothing of a plan but its placements (the simulator) may
therefore have them made `lazy`: each is noted when its session fails to fit, and the noted ones
are made, in their order and on the same state, only while a later session could still be placed
with the holds made so far (`before_place`). Holds only take room, so a session that fits nowhere
with some of them fits nowhere with all, and the placements are those of a plan that made every
reservation at once (the simulator's tests compare both). The manager's
plans make them at once: it shows them and estimates from them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from sokovan.common.types import ClusterMode
from sokovan.orchestrator.provisioner.estimates import reserve_for
from sokovan.orchestrator.provisioner.snapshot import Plan, ScalingGroupSnapshot
from sokovan.orchestrator.provisioner.stages import Selector
from sokovan.orchestrator.provisioner.timeline import Timeline
from sokovan.state.session_reads import SessionWithKernels

# How many waiting sessions get a reservation in one plan, in the sequencer's order (Slurm's
# backfill depth): the first alone would leave a big session behind an older small one
# unprotected, as every waiting session is "first" in turn when the group is full.
RESERVE_DEPTH = 16

# A placed session's max_duration counts from its RUNNING, which comes after its placement by the
# agent's start (image, container): a reservation lets it pass only if it ends by then even so.
START_MARGIN = dt.timedelta(seconds=3)


def ends_by(session: SessionWithKernels, now: dt.datetime | None) -> dt.datetime | None:
    """When `session` would have ended at the latest if placed `now`, by its declared
    `max_duration` (a reservation lets it use its room meanwhile only then)."""
    if session.max_duration is None or now is None:
        return None
    return now + START_MARGIN + dt.timedelta(seconds=session.max_duration)


@dataclass
class Reservations:
    lazy: bool = False
    timeline: Timeline | None = None  # the plan's, built at its first reservation
    noted: list[SessionWithKernels] = field(default_factory=list)  # lazy: not made yet, in order

    def begin(self) -> None:
        self.timeline, self.noted = None, []

    def room_for_more(self, plan: Plan) -> bool:
        return len(plan.reservations) + len(self.noted) < RESERVE_DEPTH

    def reserve(self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot, plan: Plan) -> None:
        if self.lazy:
            self.noted.append(session)
        else:
            self._make(session, snapshot, plan)

    def before_place(
        self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot, plan: Plan, selector: Selector
    ) -> None:
        """Make the noted reservations, in order, for as long as `session` could be placed with
        the holds made so far: once it could not, it will not be placed whatever the rest hold."""
        while self.noted and _could_fit(session, snapshot, selector):
            self._make(self.noted.pop(0), snapshot, plan)

    def placed(self, session: SessionWithKernels, agents: Sequence[str], nominee: bool) -> None:
        """`session` was placed on `agents`; a nominee's held room went back to every agent."""
        if self.timeline is not None:
            self.timeline.occupy(session, agents)
            if nominee:
                self.timeline.forget()

    def _make(self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot, plan: Plan) -> None:
        if self.timeline is None:
            self.timeline = Timeline.build(snapshot, plan.placed)
        reserve_for(session, self.timeline, plan)


def _could_fit(session: SessionWithKernels, snapshot: ScalingGroupSnapshot, selector: Selector) -> bool:
    """Whether some agent could take `session` (one of its kernels, for a multi-node one) with the
    room held as it is now: what `Provisioner._place` asks first."""
    count = len(session.kernels)
    spread = session.cluster_mode == ClusterMode.MULTI_NODE and count > 1
    need = session.resources if spread else session.resources.scaled(count)
    kernels = 1 if spread else count
    until = ends_by(session, snapshot.now)
    image, priority, sid = session.image, session.priority, session.id
    return (
        selector.pick(session, lambda a: a.can_take(image, need, kernels, priority, sid, until), snapshot)
        is not None
    )
