"""Ask each kernel's agent to do the next step for a batch of sessions: one handler, two uses.

`PREPARE_SESSIONS` (SCHEDULED → PREPARING): agents check for, and pull, the image; they answer
with kernel events (pulling, prepared, image-pull-failed) and PromoteToPrepared moves on.
`START_SESSIONS` (PREPARED → CREATING): agents start the kernels; they answer with kernel events
(running, creation-failed, terminated) and PromoteToRunning moves on.
The events a call caused come back in its answer too (`agent.answers`): a session every kernel
of which was answered into the next status (prepared, running) moves on in the same write as the
call's success (`answered_moves`), and the coordinator applies any other answered event right
after that write (`ScheduleCoordinator.apply_answers`), so a session whose image is there, or
whose kernel starts at once, moves on within the lane's cycle instead of a trip over the bus later.
The sessions a prepare cycle so moved to PREPARED are started by that same cycle, in the start
lane's place, where this process may (`ScheduleCoordinator.carry_on`, `CallAgents.focused`).

A failed call is a failure of that stage (retried, then the session is rescheduled). The kernels
for one agent go in calls that stay under its body limit; a session too large for one call fails
alone, never the others of the batch.

All agents are called at once, and their answers are awaited `STRAGGLER_WAIT` seconds only: the
sessions of an agent that is slower are carried on in the background (`InFlight`) and left out of
the next cycles' reads while their calls run (so a batch of `CALL_BATCH` is never filled with
sessions it cannot call); when the calls end, the lane is woken and its next cycle reports them.
One slow agent never holds other agents' sessions, or the lane, back.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field

from sokovan.common.rpc import AcceptedResponse, AgentRPCClient, KernelSpec
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import Phase
from sokovan.db.among import among_bound
from sokovan.db.models import Session
from sokovan.orchestrator.schedule.agent_calls import Items, Target, answered, fan_out, kernel_spec
from sokovan.orchestrator.schedule.handler import (
    KernelCondition,
    SessionHandler,
    SessionResultT,
    StatusTransitions,
    TransitionStatus,
)
from sokovan.orchestrator.schedule.handlers.promotion.promote_sessions import Promotion
from sokovan.orchestrator.schedule.handlers.promotion.promotions import (
    PROMOTE_TO_PREPARED,
    PROMOTE_TO_RUNNING,
)
from sokovan.state.kernel_events import KernelEvent
from sokovan.state.session_queries import BATCH_LIMIT, Narrowing
from sokovan.state.session_reads import SessionWithKernels

S, K = SessionStatus, KernelStatus
STRAGGLER_WAIT = 0.5  # seconds a cycle waits for the agents' answers
# Sessions a cycle calls agents for, at most. Batches of 1,000 instead (so that the prepare and
# start lanes would work on different batches at once) made no difference to a 10,000-session
# burst (all RUNNING after 21.7 and 20.4 s, against 18.2 and 21.2 s, alternating).
CALL_BATCH = BATCH_LIMIT
WAKE_EVERY = 0.05  # calls ending within this long wake the lane once
FORGET_AFTER = 600.0  # an outcome no cycle asked for (the session moved on meanwhile) is dropped
# An AgentRPCClient method taking (rpc address, kernel specs, agent id).
AgentMethod = Callable[[AgentRPCClient, str, list[KernelSpec], str], Awaitable[object]]
_REQUEUE = TransitionStatus(S.PENDING, K.PENDING)


@dataclass(frozen=True)
class Answered:
    """The promotion a call's answers may complete at once (`answered_moves`), and the status its
    agents must have answered every kernel of a session into."""

    spec: Promotion
    kernel_to: KernelStatus


@dataclass(frozen=True)
class AgentCall:
    name: str
    phase: Phase
    session: SessionStatus  # the sessions it works on
    kernel: KernelStatus  # the kernels it sends
    method: AgentMethod
    to: TransitionStatus  # where success takes the session and the kernels sent
    then: Answered


PREPARE_SESSIONS = AgentCall(
    name="PrepareSessions",
    phase=Phase.PREPARE,
    session=S.SCHEDULED,
    kernel=K.SCHEDULED,
    method=AgentRPCClient.check_and_pull,
    to=TransitionStatus(S.PREPARING, K.PREPARING),
    then=Answered(PROMOTE_TO_PREPARED, K.PREPARED),
)
START_SESSIONS = AgentCall(
    name="StartSessions",
    phase=Phase.START,
    session=S.PREPARED,
    kernel=K.PREPARED,
    method=AgentRPCClient.create_kernels,
    to=TransitionStatus(S.CREATING, K.CREATING),
    then=Answered(PROMOTE_TO_RUNNING, K.RUNNING),
)


@dataclass
class InFlight:
    """Sessions whose agent calls outlasted a cycle: running, and ended with their outcome."""

    wake: Callable[[], None] = lambda: None
    running: dict[uuid.UUID, asyncio.Future[str | None]] = field(default_factory=dict)
    ended: dict[uuid.UUID, tuple[float, str | None]] = field(default_factory=dict)  # → (when, failure)
    _wake_handle: asyncio.TimerHandle | None = None

    def add(self, session_id: uuid.UUID, outcome: asyncio.Future[str | None]) -> None:
        self.running[session_id] = outcome
        outcome.add_done_callback(lambda f: self._ended(session_id, f))

    def _ended(self, session_id: uuid.UUID, outcome: asyncio.Future[str | None]) -> None:
        self.running.pop(session_id, None)
        failure = None if outcome.cancelled() or outcome.exception() is None else str(outcome.exception())
        reason = "call cancelled" if outcome.cancelled() else failure or outcome.result()
        self.ended[session_id] = (time.monotonic(), reason)
        # One wake for the calls that end within `WAKE_EVERY` (a wake per call would re-read the
        # lane's whole batch once per agent); the last call out wakes at once.
        if not self.running:
            self._wake_now()
        elif self._wake_handle is None:
            self._wake_handle = asyncio.get_running_loop().call_later(WAKE_EVERY, self._wake_now)

    def _wake_now(self) -> None:
        if self._wake_handle is not None:
            self._wake_handle.cancel()
            self._wake_handle = None
        self.wake()

    def collect(
        self, targets: Sequence[SessionWithKernels], into: SessionResultT
    ) -> list[SessionWithKernels]:
        """Report the ended calls' sessions into `into`; the targets with no call running or ended."""
        fresh = []
        for session in targets:
            ended = self.ended.pop(session.id, None)
            if ended is not None:
                if ended[1] is None:
                    into.successes.append(session.id)
                else:
                    into.failures[session.id] = ended[1]
            elif session.id not in self.running:
                fresh.append(session)
        cutoff = time.monotonic() - FORGET_AFTER
        for session_id in [sid for sid, (when, _) in self.ended.items() if when < cutoff]:
            del self.ended[session_id]
        return fresh


class CallAgents(SessionHandler):
    def __init__(self, call: AgentCall, rpc: AgentRPCClient, wake: Callable[[], None] | None = None) -> None:
        """`wake`: runs the handler's lane again (when calls that outlasted a cycle end)."""
        self.name = call.name
        self.phase = call.phase
        self.targets = frozenset({call.session})
        self.kernels = KernelCondition(frozenset({call.kernel}))
        self.batch = CALL_BATCH
        self.transitions = StatusTransitions(success=call.to, expired=_REQUEUE, give_up=_REQUEUE)
        self.call = call
        self._rpc = rpc
        self.in_flight = InFlight(wake or (lambda: None))
        self._answers: list[KernelEvent] = []
        self._focus: list[uuid.UUID] | None = None
        self._wait = STRAGGLER_WAIT

    def focused(self, session_ids: Collection[uuid.UUID], wait: float) -> CallAgents:
        """The same call for `session_ids` only (those of them in its targets), its answers awaited
        `wait` seconds: a session another lane's cycle just handed on is called at once
        (`ScheduleCoordinator.carry_on`), as the lane's own next cycle would have called it. It
        shares this handler's calls in flight and the answers they bring, so a call that outlasts
        `wait` is reported, and its answers applied, by this handler's lane."""
        view = copy.copy(self)  # shallow: the same InFlight, the same list of answers
        view._focus = list(session_ids)
        view._wait = wait
        return view

    def narrowing(self, now: dt.datetime) -> Narrowing | None:
        """The sessions whose calls are still running are not read (their outcome comes later);
        a focused call reads its sessions only."""
        busy = list(self.in_flight.running)
        if self._focus is not None:
            params = {"focus": self._focus}
            if not busy:
                return Narrowing((self.name, "focus"), lambda: among_bound(Session.id, "focus"), params)
            return Narrowing(
                (self.name, "focus", "busy"),
                lambda: among_bound(Session.id, "focus") & ~among_bound(Session.id, "busy"),
                {**params, "busy": busy},
            )
        if not busy:
            return None
        return Narrowing((self.name, "busy"), lambda: ~among_bound(Session.id, "busy"), {"busy": busy})

    async def execute(self, targets: Sequence[SessionWithKernels]) -> SessionResultT:
        result = SessionResultT()
        fresh = self.in_flight.collect(targets, result)
        specs = {k.id: kernel_spec(s, k) for s in fresh for k in s.kernels if k.status == self.call.kernel}
        sizes = {kid: len(spec.model_dump_json()) + 1 for kid, spec in specs.items()}  # and its comma

        async def send(target: Target, items: Items) -> object:
            agent_id, addr = target
            sent = [specs[k.id] for _, k in items]
            response = await self.call.method(self._rpc, addr, sent, agent_id)
            if isinstance(response, AcceptedResponse) and response.events:
                self._answers += answered(response.events, agent_id, {spec.kernel_id for spec in sent})
            return response

        outcome = await fan_out(
            fresh,
            lambda k: k.status == self.call.kernel,
            send,
            lambda k: sizes[k.id],
            wait=self._wait,
            late=self.in_flight.add,
        )
        result.successes += outcome.successes
        result.failures.update(outcome.failures)
        return result

    def give_back(self, answers: list[KernelEvent]) -> None:
        """Answers that could not be applied now: the next take returns them first."""
        self._answers[:0] = answers  # in place: a focused view shares the list

    def take_answers(self) -> list[KernelEvent]:
        """The kernel events the agents' answers carried since the last take (a late call's too),
        for the coordinator to apply once it has written this cycle's transitions."""
        answers = list(self._answers)
        self._answers.clear()  # in place: a focused view shares the list
        return answers
