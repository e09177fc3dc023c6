"""ScheduleCoordinator: the coordinator spine over sessions.

Handlers only say success / failure / skip. The coordinator judges failures (NEED_RETRY, GIVE_UP
or EXPIRED, by `classify`) and waits (EXPIRED), then applies the handler's transition table
through guarded, batched writes with history (`judgement`, `SessionKind`).

Handlers run in lanes: ordered lists, each run as one cycle under its own cluster-wide lock, so
lanes run concurrently (placement does not wait for the agents' answers to the previous batch)
while each behaves as if one manager ran it. `cycle()` runs all lanes in turn.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import Hint
from sokovan.bus.user_events import UserEventPublisher, publish
from sokovan.common.metrics import HANDLER_RUNS
from sokovan.common.supervise import describe
from sokovan.config.cluster import ClusterConfig
from sokovan.orchestrator.locks import CycleLock
from sokovan.orchestrator.schedule.answered_moves import two_step_moves
from sokovan.orchestrator.schedule.event_promotions import promotions_for
from sokovan.orchestrator.schedule.handler import SessionHandler
from sokovan.orchestrator.schedule.handlers.lifecycle.call_agents import CallAgents
from sokovan.orchestrator.schedule.handlers.promotion.promote_sessions import PromoteSessions
from sokovan.orchestrator.schedule.sessions_kind import SessionKind
from sokovan.orchestrator.spine.coordinator import Coordinator
from sokovan.orchestrator.spine.result import HandlerResult
from sokovan.state.kernel_events import KernelEvent, KernelEventApplier
from sokovan.state.kernel_writes import KernelMove
from sokovan.state.session_reads import SessionWithKernels, statuses_present
from sokovan.state.session_writes import SessionTransition
from sokovan.state.status_info import SessionStatusInfo

log = structlog.get_logger(__name__)

# Sessions one cycle's two-step moves land in the next agent call's status that the same cycle
# carries on into that call (`carry_on`), at most. More (a steady stream, a burst) are left to the
# next lane's own cycle, woken by the write as before, so that the two lanes' calls overlap: the
# agents work on one batch while the manager writes the other. Carried at any size, a prepare
# cycle of 25-40 sessions at 200 creates/s also made the start call before the next SCHEDULED
# sessions were read, and their SCHEDULED -> PREPARING hop grew by about what the PREPARED ->
# CREATING hop saved.
CARRY_AT_MOST = 16
# Seconds a carried call's answers are awaited: a call that takes longer (a container that starts
# slowly) goes on in the background and the start lane reports it (`CallAgents.focused`), so the
# lane that carried it is held no longer than this.
CARRY_WAIT = 0.1


class ScheduleCoordinator(
    Coordinator[SessionHandler, SessionWithKernels, SessionTransition, HandlerResult[SessionStatusInfo]]
):
    def __init__(
        self,
        engine: AsyncEngine,
        config: ClusterConfig,
        handlers: Sequence[SessionHandler] | Mapping[str, Sequence[SessionHandler]],
        lock: CycleLock | None = None,
        events: UserEventPublisher | None = None,
    ) -> None:
        lanes = handlers if isinstance(handlers, Mapping) else {"all": handlers}
        super().__init__(Hint.SCHEDULE, SessionKind(config), engine, lanes, lock, events)
        self._kernel_events = KernelEventApplier(engine)
        # Runs work in the place of a cycle of the lane named, at once, if this process may (it
        # holds the lane and no cycle of it runs); None if not. The orchestrator sets it.
        self.run_now: Callable[[str, Callable[[], Awaitable[bool]]], Awaitable[bool | None]] = _not_here
        self._carries: dict[str, tuple[str, CallAgents] | None] = {}

    def for_short_cycle(self, handler: SessionHandler) -> SessionHandler | None:
        """A hinted cycle leaves the promotions the event path follows to it (`Promotion.followed`):
        only agents' events meet their conditions, and the event path promotes those sessions as
        the events arrive. The long cycle, the safety net, runs them over every session."""
        return None if isinstance(handler, PromoteSessions) and handler.followed else handler

    def statuses_of(self, handler: SessionHandler) -> frozenset[str] | None:
        if handler.always_runs:
            return None
        return frozenset(s.value for s in handler.targets | (handler.expires_in or frozenset()))

    async def present(self, handlers: Sequence[SessionHandler]) -> frozenset[str] | None:
        wanted = set().union(*(self.statuses_of(h) or frozenset() for h in handlers))
        if not wanted:
            return None
        async with self._reads.connect() as conn:
            return await statuses_present(conn, sorted(wanted))

    async def settle(
        self,
        handler: SessionHandler,
        result: HandlerResult[SessionStatusInfo],
        rows: Sequence[SessionWithKernels],
        now: dt.datetime,
        entered: set[str] | None,
        landed: dict[Any, str] | None,
    ) -> bool:
        """An agent call's transitions are written with what its agents answered: the sessions
        every kernel of which was answered into the next status move on in the same write
        (`answered_moves`), the other answered events are applied after it (`apply_answers`)."""
        changes = self.kind.judge(handler, result, rows, now)
        if not isinstance(handler, CallAgents):
            return await self.apply(changes, entered, landed)
        two_step, rest, left = two_step_moves(handler.call, changes, rows, handler.take_answers())
        # Sessions a lane's cycle hands on to an agent call of the next lane are carried on
        # (`carry_on`), a few at a time; a caller that runs more handlers on the sessions itself
        # (`landed`) is not. More are handed on as before, the next lane woken by the write.
        few = 0 < len(two_step) <= CARRY_AT_MOST
        carry = self._carried_into(handler) if landed is None and few else None
        ends: dict[Any, str] | None = {} if carry is not None else landed
        # A two-step move is written only with other hand-offs: a batch of its own.
        moved = await self.apply(two_step, entered, ends)
        if two_step:  # the promotion each two-step move stands for ran too
            HANDLER_RUNS.labels(handler=handler.call.then.spec.name, result="SUCCESS").inc(len(two_step))
        moved |= await self.apply(rest, entered, landed)
        if left and not await self.apply_answers(left):
            handler.give_back(left)
        if carry is not None and ends is not None:
            await self.carry_on(*carry, ends)
        return moved or bool(left)

    def _carried_into(self, handler: CallAgents) -> tuple[str, CallAgents] | None:
        """The lane (hint name) and agent call that take on the sessions `handler`'s two-step
        moves land (prepared sessions: the start lane's call), if any."""
        if handler.name not in self._carries:
            landing = handler.call.then.spec.to
            found = None
            for name in self.next_lanes(frozenset({landing.value})):
                first = next(iter(self.lanes.get(name.removeprefix(f"{self.name}."), [])), None)
                if isinstance(first, CallAgents) and first.call.session == landing:
                    found = (name, first)
            self._carries[handler.name] = found
        return self._carries[handler.name]

    async def carry_on(self, lane: str, call: CallAgents, ends: dict[Any, str]) -> None:
        """Make `call` (lane `lane`'s) for the sessions that just landed in its status (`ends`:
        session → status), at once, in the place of a cycle of that lane: their next hop costs
        no hand-off to another cycle and no read of the lane's whole batch, as the sessions are
        known. Done only where this process holds that lane and no cycle of it runs, its answers
        awaited `CARRY_WAIT` only; otherwise, and for any session the call leaves where it was (a
        retry to come, a call still running), that lane is woken as before. The sessions
        elsewhere wake their lanes."""
        status = call.call.session.value
        ready = [sid for sid, dst in ends.items() if dst == status]
        self.wake_for(frozenset(dst for dst in ends.values() if dst != status))
        if not ready:
            return
        reached: dict[Any, str] = {}
        ran: bool | None = None
        try:
            focused = call.focused(ready, CARRY_WAIT)
            ran = await self.run_now(lane, lambda: self.run_handler(focused, landed=reached))
        finally:  # a call that failed, or was cancelled, leaves its sessions to that lane too
            self.wake_for(frozenset(reached.values()))
            if ran is None or len(reached) < len(ready) or status in reached.values():
                self.on_wake(lane)

    async def apply_answers(self, events: Sequence[KernelEvent]) -> bool:
        """Apply the kernel events agents' answers carried (`agent.answers`) that no two-step move
        took, and follow them as the bus's are followed; False when they could not be written
        (the caller keeps them for its next cycle)."""
        try:
            moves = await self._kernel_events.apply_many(events)
        except Exception as exc:
            log.warning("answers.apply_failed", events=len(events), error=describe(exc))
            return False
        if moves:
            await publish(self._events, [m.event() for m in moves])
            await self.follow_kernels(moves)
        return True

    async def follow_kernels(self, moves: Sequence[KernelMove]) -> bool:
        """Run the promotions the kernels that just moved may complete, for their sessions only
        (`event_promotions`); True when a session moved. The next lanes are woken for where the
        sessions end up: a batch job that went RUNNING → TERMINATING → TERMINATED here wakes
        placement, not also the end lane for a TERMINATING it has already left."""
        moved = False
        landed: dict[Any, str] = {}
        for spec, session_ids in promotions_for(moves):
            moved |= await self.run_handler(PromoteSessions(spec).focused(session_ids), landed=landed)
        self.wake_for(frozenset(landed.values()))
        return moved


async def _not_here(lane: str, work: Callable[[], Awaitable[bool]]) -> bool | None:
    """No lane runs here (a coordinator without an orchestrator): hand off by waking instead."""
    return None
