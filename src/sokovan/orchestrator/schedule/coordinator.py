"""ScheduleCoordinator: runs the session handlers and applies what they report.

Handlers only say success / failure / skip. The coordinator judges failures (NEED_RETRY or
GIVE_UP or EXPIRED, by `classify`) and waits (EXPIRED, by `is_expired`), then applies the handler's
transition table through guarded, batched writes with history (`apply_session_transitions`).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.user_events import UserEventPublisher, publish
from sokovan.common.metrics import HANDLER_RUNS, SESSION_TRANSITIONS
from sokovan.common.types import FailureCause, KernelStatus, SchedulingResult, SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.manager.repositories.transitions import SessionTransition, apply_session_transitions
from sokovan.orchestrator.classify import Limits, PhaseState, classify, is_expired
from sokovan.orchestrator.handler_types import (
    HandlerResult,
    LifecycleHandler,
    SessionPromotionHandler,
    SessionWithKernels,
    TransitionStatus,
    kernels_match,
)
from sokovan.orchestrator.locks import CycleLock
from sokovan.orchestrator.schedule.endings import cancelled_result, final_status
from sokovan.orchestrator.schedule.repository import fetch_sessions

log = structlog.get_logger(__name__)

Handler = LifecycleHandler | SessionPromotionHandler


class ScheduleCoordinator:
    """Runs the session handlers in lanes.

    A lane is an ordered list of handlers run as one cycle under its own cluster-wide lock, so
    lanes run concurrently (placement does not wait for the agents' answers to the previous
    batch) while each lane behaves as if one manager ran it. `cycle()` runs all lanes in turn.
    """

    name = "schedule"

    def __init__(
        self,
        engine: AsyncEngine,
        config: ClusterConfig,
        handlers: Sequence[Handler] | Mapping[str, Sequence[Handler]],
        lock: CycleLock | None = None,
        events: UserEventPublisher | None = None,
    ) -> None:
        self._engine = engine
        self._events = events
        self._config = config
        self.lanes: dict[str, list[Handler]] = (
            {lane: list(hs) for lane, hs in handlers.items()}
            if isinstance(handlers, Mapping)
            else {"all": list(handlers)}
        )
        self._lock = lock

    async def cycle(self) -> bool:
        """Run every lane once; True when any session moved."""
        moved = False
        for lane in self.lanes:
            moved |= await self.cycle_lane(lane)
        return moved

    async def cycle_lane(self, lane: str) -> bool:
        if self._lock is not None:
            async with self._lock.hold(f"{self.name}.{lane}") as acquired:
                return await self._run(self.lanes[lane]) if acquired else False
        return await self._run(self.lanes[lane])

    async def _run(self, handlers: Sequence[Handler]) -> bool:
        moved = False
        for handler in handlers:
            if isinstance(handler, LifecycleHandler):
                moved |= await self.run_lifecycle(handler)
            else:
                moved |= await self.run_promotion(handler)
        return moved

    # -- lifecycle ---------------------------------------------------------------------------

    async def run_lifecycle(self, handler: LifecycleHandler) -> bool:
        async with self._engine.connect() as conn:
            targets = await fetch_sessions(
                conn, handler.target_session_statuses, handler.target_kernel_statuses
            )
        if not targets:
            return False
        result = await handler.execute(targets)
        return await self._handle_result(handler, result, targets)

    async def _handle_result(
        self, handler: LifecycleHandler, result: HandlerResult, sessions: Sequence[SessionWithKernels]
    ) -> bool:
        table = handler.status_transitions()
        limit = self._config.phases.get(handler.phase)
        now = dt.datetime.now(dt.UTC)
        by_id = {s.id: s for s in sessions}
        expected = handler.target_session_statuses
        kernel_guard = handler.target_kernel_statuses or KernelStatus.non_terminal()
        out: list[SessionTransition] = []

        def add(sid: uuid.UUID, res: SchedulingResult, to: TransitionStatus | None, **kw: Any) -> None:
            out.append(self._transition(handler.name(), by_id[sid], expected, res, to, **kw))

        for sid in result.successes:
            add(
                sid,
                SchedulingResult.SUCCESS,
                table.success,
                kernel_expected=kernel_guard,
                info=result.success_info.get(sid),
            )
        limits = Limits(max_tries=limit.max_tries, timeout=limit.timeout)
        for sid, message in result.failures.items():
            session = by_id[sid]
            if session.status == SessionStatus.PENDING:
                limits = Limits(max_tries=limit.max_tries, timeout=session.pending_timeout)
            verdict = classify(PhaseState(session.phase_attempts + 1, session.status_changed_at), limits, now)
            to = {
                SchedulingResult.GIVE_UP: table.give_up,
                SchedulingResult.EXPIRED: table.expired,
            }.get(verdict, table.need_retry)
            info: dict[str, Any] | None
            if to is not None and to.session == SessionStatus.PENDING:
                info = _requeue_info(session, message)
            elif verdict is SchedulingResult.EXPIRED:
                info = _timeout_info(session, message)
            else:
                info = _give_up_info(session, verdict, message, to)
            add(sid, verdict, to, message=message, bump=True, info=info)
        for sid, info in result.rejected.items():
            add(sid, SchedulingResult.GIVE_UP, table.give_up, message=info.get("message"), info=info)
        attempted = set(result.successes) | set(result.failures) | set(result.rejected)
        for session in sessions:
            if session.id in attempted:
                continue
            if is_expired(session.status_changed_at, now, self._timeout(handler, session)):
                message = f"{session.status} for longer than its timeout"
                requeue = table.expired is not None and table.expired.session == SessionStatus.PENDING
                info = _requeue_info(session, message) if requeue else _timeout_info(session, message)
                add(session.id, SchedulingResult.EXPIRED, table.expired, message=message, info=info)
            elif session.id in result.skipped:
                reason = result.skipped[session.id]
                if (
                    session.status == SessionStatus.PENDING
                    and session.status_info.get("pending_reason") != reason
                ):
                    add(
                        session.id,
                        SchedulingResult.SKIPPED,
                        None,
                        message=reason,
                        info={"pending_reason": reason},
                    )
        return await self._apply(out)

    def _timeout(self, handler: LifecycleHandler, session: SessionWithKernels) -> float:
        if session.status == SessionStatus.PENDING:
            return session.pending_timeout
        return self._config.phases.get(handler.phase).timeout

    # -- promotion ---------------------------------------------------------------------------

    async def run_promotion(self, handler: SessionPromotionHandler) -> bool:
        """Promote the sessions whose kernels meet the handler's condition (decided in SQL), and
        end the ones that waited in an expiring status past the phase timeout."""
        now = dt.datetime.now(dt.UTC)
        async with self._engine.connect() as conn:
            matching = await fetch_sessions(
                conn, handler.target_session_statuses, handler.check_kernel_statuses, match=handler.match_type
            )
            stuck: list[SessionWithKernels] = []
            timeout = self._config.phases.get(handler.phase).timeout if handler.phase else 0
            if handler.expiring_statuses and timeout > 0:
                stuck = await fetch_sessions(
                    conn, handler.expiring_statuses, changed_before=now - dt.timedelta(seconds=timeout)
                )
        out: list[SessionTransition] = []
        for session in matching:
            # Re-checked in Python on the rows read, so the SQL and the rule cannot disagree.
            if not kernels_match(session.kernels, handler.check_kernel_statuses, handler.match_type):
                continue
            status, result, info = handler.outcome(session)
            out.append(
                self._transition(
                    handler.name(),
                    session,
                    handler.target_session_statuses,
                    SchedulingResult.SUCCESS,
                    TransitionStatus(status, None),
                    info=info,
                    session_result=result,
                )
            )
        promoted = {t.session_id for t in out}
        for session in stuck:
            if session.id in promoted:
                continue
            message = f"{session.status} for longer than the {handler.phase} timeout"
            out.append(
                self._transition(
                    handler.name(),
                    session,
                    handler.target_session_statuses,
                    SchedulingResult.EXPIRED,
                    TransitionStatus(SessionStatus.TERMINATING, None),
                    message=message,
                    info=_timeout_info(session, message),
                )
            )
        return await self._apply(out)

    # -- shared ------------------------------------------------------------------------------

    @staticmethod
    def _transition(
        handler: str,
        session: SessionWithKernels,
        expected: frozenset[SessionStatus],
        res: SchedulingResult,
        to: TransitionStatus | None,
        *,
        message: str | None = None,
        info: dict[str, Any] | None = None,
        bump: bool = False,
        kernel_expected: frozenset[KernelStatus] | None = None,
        session_result: Any = None,
    ) -> SessionTransition:
        to_status = to.session if to else None
        kernel_to = to.kernel if to else None
        merged = {**session.status_info, **(info or {})}
        if to_status in (SessionStatus.TERMINATED, SessionStatus.ERROR):
            # Whatever table entry ends a session, the cause it carries decides how it ends.
            to_status, session_result = final_status(merged)
        elif to_status == SessionStatus.CANCELLED:
            session_result = cancelled_result(merged)
        if kernel_expected is None or (to_status is not None and to_status.is_terminal):
            kernel_expected = KernelStatus.non_terminal()
        if kernel_to == KernelStatus.PENDING:
            kernel_expected = KernelStatus.non_terminal()
        return SessionTransition(
            session_id=session.id,
            expected=expected,
            to_status=to_status,
            handler=handler,
            result=res,
            kernel_to=kernel_to,
            kernel_expected=kernel_expected,
            session_result=session_result,
            status_info=info,
            message=message,
            attempt=session.phase_attempts + (1 if bump else 0),
            bump_attempts=bump,
        )

    async def _apply(self, transitions: list[SessionTransition]) -> bool:
        if not transitions:
            return False
        async with self._engine.begin() as conn:
            applied = await apply_session_transitions(conn, transitions)
        for t in transitions:
            HANDLER_RUNS.labels(handler=t.handler, result=t.result.value).inc()
        for src, dst in applied.moved.values():
            SESSION_TRANSITIONS.labels(from_status=src.value, to_status=dst.value).inc()
        await publish(self._events, applied.events())
        if applied.moved:
            moves = Counter(f"{src.value}->{dst.value}" for src, dst in applied.moved.values())
            log.info("sessions.moved", **dict(moves))
        return bool(applied.moved) or any(
            t.kernel_to is not None for t in transitions if t.session_id in applied.applied
        )


def _give_up_info(
    session: SessionWithKernels, verdict: SchedulingResult, message: str, to: TransitionStatus | None
) -> dict[str, Any] | None:
    """Giving up ends a session with AGENT_TRANSIENT, unless it already carries a cause (e.g. the
    user's request to terminate it): that cause stays."""
    if verdict is not SchedulingResult.GIVE_UP or to is None or to.session is None:
        return None
    if to.session.is_terminal:
        if "cause" in session.status_info:
            return {"gave_up": message}
        return {"cause": FailureCause.AGENT_TRANSIENT.value, "message": message}
    return {"last_failure": message}


def _requeue_info(session: SessionWithKernels, message: str) -> dict[str, Any]:
    """A session sent back to PENDING: why, and the agents it failed on, which the next placement
    avoids unless no other agent fits. No cause: it has not failed, it is rescheduled."""
    agents = sorted({k.agent_id for k in session.kernels if k.agent_id is not None})
    return {"requeued": {"from": session.status.value, "reason": message}, "avoid_agents": agents}


def _timeout_info(session: SessionWithKernels, message: str) -> dict[str, Any]:
    """A timeout is the cause unless the session already carries one (e.g. the user's request)."""
    if "cause" in session.status_info:
        return {"timeout": message}
    return {"cause": FailureCause.SCHEDULER_TIMEOUT.value, "message": message}
