"""Placement, pure over a snapshot: validators + type hooks → sequencer → filter + selector → plan.

Every rejection is data: an agent that cannot take a session says why, and the reasons are
summed into the session's pending_reason ("0/3 agents fit: 2 insufficient cpu, 1 not READY (DRAINING)").
All validators run, so every violated limit is reported at once.

Queue policy: with `block`, the first session that no agent has room for holds its place and
nothing after it is placed in this cycle (no starvation of big sessions, at the cost of idle
room); with `backfill` (the default) smaller sessions behind it may use the room meanwhile; with
`reserve`, the first sessions that do not fit (up to `RESERVE_DEPTH`) each get a reservation
(`reservations`): the agents and the time they will have room by the running sessions' expected
ends (`timeline`), held for it as a nominee's room is (`AgentSnapshot.held`, with `until`), so
that a later session starts ahead of it only where it fits beside that room or declares a
`max_duration` that ends before.
A session that waits for a validator (quota, concurrency, dependencies) never blocks others.
Every waiting session then gets a start-time estimate from the same timeline (`estimates`).

Preemption (the group's mode not `off`): a session that passed the validators and that no agent
has room for asks `victims.select_victims`; when victims would make it fit, the plan records a
`Preemption` (the session stays PENDING, nominated to its agents), its victims are not offered to
later sessions, and the room they free is held for it (`AgentSnapshot.held`) against every later
session of lower or equal priority. A nominee in force is placed on its nominated agents first
and otherwise waits for its victims; one whose nomination lapsed competes again (`Plan.lapsed`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections import Counter
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import cast

from sokovan.common.image_refs import offers
from sokovan.common.preemption import NOMINATED_AGENTS, PreemptionMode
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus, ClusterMode
from sokovan.orchestrator.hooks import hook_for
from sokovan.orchestrator.provisioner.estimates import estimate
from sokovan.orchestrator.provisioner.reasons import (
    AgentRefusal,
    agents_fit,
    insufficient,
    multi_node_needs,
    no_victims,
    not_ready,
    queued_behind,
    waiting_for_victims,
)
from sokovan.orchestrator.provisioner.reservations import Reservations, ends_by
from sokovan.orchestrator.provisioner.snapshot import (
    AgentSnapshot,
    Hold,
    Placement,
    Plan,
    Preemption,
    ScalingGroupSnapshot,
    Waiter,
)
from sokovan.orchestrator.provisioner.stages import Reject, Selector, Sequencer, Validator, Wait
from sokovan.orchestrator.provisioner.victims import select_victims
from sokovan.state.session_reads import YIELD_EVERY, SessionWithKernels


def why_not(
    agent: AgentSnapshot,
    image: str,
    slots: ResourceSlots,
    kernels: int,
    session: SessionWithKernels | None = None,
    now: dt.datetime | None = None,
) -> str | None:
    """None when `agent` can take `kernels` kernels needing `slots` in all, else the reason."""
    if agent.status != AgentStatus.READY:
        return not_ready(agent.status)
    if not agent.schedulable:
        return AgentRefusal.UNSCHEDULABLE
    if not offers(agent.images, image):
        return AgentRefusal.IMAGE_NOT_OFFERED
    if agent.max_kernels is not None and agent.kernel_count + kernels > agent.max_kernels:
        return AgentRefusal.AT_KERNEL_LIMIT
    short = slots.shortfall(agent.free)
    if short:
        return insufficient(short[0])
    if session is not None and not agent.can_take(
        image, slots, kernels, session.priority, session.id, ends_by(session, now)
    ):
        return AgentRefusal.RESERVED if any(h.reserved for h in agent.held) else AgentRefusal.HELD
    return None


def rank_pending(sessions: Sequence[SessionWithKernels]) -> dict[uuid.UUID, int]:
    """Each session's 1-based position among its keypair's sessions, oldest first."""
    seen: Counter[str] = Counter()
    ranks = {}
    for s in sorted(sessions, key=lambda s: (s.created_at, s.id)):
        seen[s.access_key] += 1
        ranks[s.id] = seen[s.access_key]
    return ranks


@dataclass
class Provisioner:
    validators: Sequence[Validator]
    sequencer: Sequencer
    selector: Selector
    block: bool = False
    reserve: bool = False
    # start-time estimates for the waiting sessions (a cycle may skip them: `ScheduleNewSessions`)
    estimate: bool = True
    # count why each agent refused a session that fits nowhere, for its pending_reason: a walk over
    # every agent that decides nothing (the simulator, which shows no reason, turns it off)
    explain: bool = True
    # request shape → why it did not fit earlier in this plan
    _unfit: dict[tuple[object, ...], str] = field(default_factory=dict)
    # request shapes (with priority) for which no victims would make room earlier in this plan
    _no_victims: set[tuple[object, ...]] = field(default_factory=set)
    # under `reserve`: the plan's reservations (`lazy`: made only when they could change a placement)
    reservations: Reservations = field(default_factory=Reservations)

    def plan(self, sessions: Sequence[SessionWithKernels], snapshot: ScalingGroupSnapshot) -> Plan:
        steps = self.planning(sessions, snapshot)
        try:
            while True:
                next(steps)
        except StopIteration as done:
            return cast(Plan, done.value)

    async def plan_cooperatively(
        self, sessions: Sequence[SessionWithKernels], snapshot: ScalingGroupSnapshot
    ) -> Plan:
        """`plan`, handing the event loop back every `YIELD_EVERY` sessions: a cycle that plans
        thousands of sessions must not hold the process's API and event consumer for all of it."""
        steps = self.planning(sessions, snapshot)
        try:
            while True:
                next(steps)
                await asyncio.sleep(0)
        except StopIteration as done:
            return cast(Plan, done.value)

    def planning(
        self, sessions: Sequence[SessionWithKernels], snapshot: ScalingGroupSnapshot
    ) -> Generator[None, None, Plan]:
        """The plan, computed in steps: it yields after every `YIELD_EVERY` sessions."""
        plan = Plan()
        self.reservations.begin()
        snapshot.pending_rank = rank_pending(sessions)
        blocker: SessionWithKernels | None = None
        for n, session in enumerate(self.sequencer.sequence(sessions, snapshot), 1):
            if n % YIELD_EVERY == 0:
                yield
            verdict = self._validate(session, snapshot)
            if isinstance(verdict, Reject):
                plan.rejected[session.id] = (verdict.cause, verdict.message)
                continue
            if isinstance(verdict, Wait):
                plan.waiting[session.id] = verdict.reason
                plan.waiters.append(Waiter(session, for_room=False, behind=None))
                continue
            if blocker is not None:
                plan.waiting[session.id] = queued_behind(blocker.id)
                plan.waiters.append(Waiter(session, for_room=True, behind=blocker.id))
                continue
            self.reservations.before_place(session, snapshot, plan, self.selector)
            placement, reason = self._place(session, snapshot)
            if placement is None:
                self._no_room(session, snapshot, plan, reason)
                plan.waiters.append(Waiter(session, for_room=True, behind=None))
                if self.block:
                    blocker = session
                elif (
                    self.reserve
                    and self.reservations.room_for_more(plan)
                    and not _nominated(session, snapshot, plan)
                ):
                    self.reservations.reserve(session, snapshot, plan)
                continue
            plan.placements.append(placement)
            plan.placed.append((session, tuple(placement.kernels.values())))
            snapshot.charge(session)
            nominee = session.id in snapshot.nominations
            if nominee:  # only a nominee has room held for it
                for agent in snapshot.agents:
                    agent.release(session.id)
            self.reservations.placed(session, tuple(placement.kernels.values()), nominee)
        plan.roundrobin_cursor = snapshot.roundrobin_cursor
        if self.estimate and plan.waiters:
            estimate(snapshot, plan)
        return plan

    def _no_room(
        self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot, plan: Plan, reason: str
    ) -> None:
        """No agent has room: a nominee waits for its victims; otherwise preemption may find some."""
        nomination = snapshot.nominations.get(session.id)
        if nomination is not None:
            plan.waiting[session.id] = waiting_for_victims(nomination.victims, nomination.agents)
            return
        if NOMINATED_AGENTS in session.status_info:
            plan.lapsed.add(session.id)
        if snapshot.preemption.mode == PreemptionMode.OFF:
            plan.waiting[session.id] = reason
            return
        key = self._shape(session)
        preemption = None
        if key not in self._no_victims:
            preemption = select_victims(session, snapshot.agents, snapshot.candidates, snapshot.taken)
        if preemption is None:
            self._no_victims.add(key)
            plan.waiting[session.id] = no_victims(reason)
            return
        plan.preemptions.append(preemption)
        plan.lapsed.discard(session.id)
        plan.waiting_if_abandoned[session.id] = reason
        self._reserve(session, preemption, snapshot)

    @staticmethod
    def _reserve(session: SessionWithKernels, preemption: Preemption, snapshot: ScalingGroupSnapshot) -> None:
        """The victims are the preemptor's: no later session takes them; the room they free is held
        for it (net of what they still occupy, which already keeps others out)."""
        victims = set(preemption.victims)
        snapshot.taken |= victims
        occupied: dict[str, tuple[ResourceSlots, int]] = {}
        for c in snapshot.candidates:
            if c.id in victims:
                for k in c.kernels:
                    slots, n = occupied.get(k.agent_id, (ResourceSlots(), 0))
                    occupied[k.agent_id] = (slots + k.slots, n + 1)
        for agent in snapshot.agents:
            count = preemption.agents.count(agent.id)
            if not count:
                continue
            still, still_n = occupied.get(agent.id, (ResourceSlots(), 0))
            need = session.resources.scaled(count) - still
            slots = ResourceSlots({k: v for k, v in need.items() if v > 0})
            agent.held.append(Hold(session.id, session.priority, slots, max(0, count - still_n)))

    @staticmethod
    def _shape(session: SessionWithKernels) -> tuple[object, ...]:
        return (
            session.image,
            tuple(sorted(session.resources.items())),
            len(session.kernels),
            session.cluster_mode,
            session.priority,
        )

    def _validate(self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot) -> Wait | Reject | None:
        hook = hook_for(session)
        verdicts = [hook.admit(session)] if hook else []
        verdicts += [v.check(session, snapshot) for v in self.validators]
        rejects = [v for v in verdicts if isinstance(v, Reject)]
        if rejects:
            return rejects[0]
        waits = [v.reason for v in verdicts if isinstance(v, Wait)]
        return Wait("; ".join(waits)) if waits else None

    def _place(
        self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot
    ) -> tuple[Placement | None, str]:
        kernels = [k.id for k in session.kernels]
        if session.cluster_mode == ClusterMode.MULTI_NODE and len(kernels) > 1:
            return self._place_spread(session, snapshot, kernels)
        whole = session.resources.scaled(len(kernels))
        nominated = snapshot.nominations.get(session.id)
        # Room held for nominees and reservations depends on the priority (and, for a reservation,
        # on the declared run time); a nominee sees its own room.
        shape = (
            session.image, tuple(sorted(whole.items())), len(kernels), session.priority, session.max_duration
        )  # fmt: skip
        if nominated is None and shape in self._unfit:  # room only shrinks within a cycle
            return None, self._unfit[shape]
        until = ends_by(session, snapshot.now)

        def fits(a: AgentSnapshot) -> bool:
            return a.can_take(session.image, whole, len(kernels), session.priority, session.id, until)

        avoid = frozenset(session.status_info.get("avoid_agents") or ())
        agent = None
        if nominated is not None:  # its nominated agents first: their room is held for it
            agent = self.selector.pick(session, lambda a: a.id in nominated.agents and fits(a), snapshot)
        if agent is None and avoid:  # agents it failed on are the last resort, not excluded
            agent = self.selector.pick(session, lambda a: a.id not in avoid and fits(a), snapshot)
        if agent is None:
            agent = self.selector.pick(session, fits, snapshot)
        if agent is None:
            _, reasons = self._refusals(snapshot, session, whole, len(kernels))
            self._unfit[shape] = agents_fit(len(snapshot.agents), 0, reasons)
            return None, self._unfit[shape]
        agent.take(whole, len(kernels))
        self.selector.taken(agent)
        return Placement(session.id, dict.fromkeys(kernels, agent.id), session.resources), ""

    def _refusals(
        self, snapshot: ScalingGroupSnapshot, session: SessionWithKernels, slots: ResourceSlots, kernels: int
    ) -> tuple[int, Counter[str]]:
        """How many agents could take it, and why the others refuse (nothing counted unless `explain`)."""
        if not self.explain:
            return 0, Counter()
        fitting, reasons = _filter(snapshot.agents, session, slots, kernels, snapshot.now)
        return len(fitting), reasons

    def _place_spread(
        self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot, kernels: Sequence[uuid.UUID]
    ) -> tuple[Placement | None, str]:
        """Each kernel on a different agent; all or nothing."""
        chosen: list[AgentSnapshot] = []
        nominated = snapshot.nominations.get(session.id)
        prefer = frozenset(nominated.agents) if nominated is not None else frozenset()
        until = ends_by(session, snapshot.now)

        def fits(a: AgentSnapshot) -> bool:
            return a not in chosen and a.can_take(
                session.image, session.resources, 1, session.priority, session.id, until
            )

        for _ in kernels:
            agent = (
                self.selector.pick(session, lambda a: a.id in prefer and fits(a), snapshot)
                if prefer
                else None
            )
            agent = agent or self.selector.pick(session, fits, snapshot)
            if agent is None:
                break
            chosen.append(agent)
        if len(chosen) < len(kernels):
            fitting, reasons = self._refusals(snapshot, session, session.resources, 1)
            detail = agents_fit(len(snapshot.agents), fitting, reasons)
            return None, multi_node_needs(len(kernels), detail)
        for agent in chosen:
            agent.take(session.resources, 1)
            self.selector.taken(agent)
        return Placement(
            session.id, dict(zip(kernels, (a.id for a in chosen), strict=True)), session.resources
        ), ""


def _nominated(session: SessionWithKernels, snapshot: ScalingGroupSnapshot, plan: Plan) -> bool:
    """Whether room is already held for `session` by preemption (a nomination in force or made now)."""
    return session.id in snapshot.nominations or any(p.session_id == session.id for p in plan.preemptions)


def _filter(
    agents: Sequence[AgentSnapshot],
    session: SessionWithKernels,
    slots: ResourceSlots,
    kernels: int,
    now: dt.datetime,
) -> tuple[list[AgentSnapshot], Counter[str]]:
    fits: list[AgentSnapshot] = []
    reasons: Counter[str] = Counter()
    for agent in agents:
        reason = why_not(agent, session.image, slots, kernels, session, now)
        if reason is None:
            fits.append(agent)
        else:
            reasons[reason] += 1
    return fits, reasons
