"""How the ScheduleCoordinator turns what a session handler reported into guarded transitions.

Failures are judged by the one pure `classify` (NEED_RETRY, EXPIRED or GIVE_UP from the attempts
in this phase, when it began and the phase's limits); sessions not attempted that waited past
their timeout expire; rejections give up at once; a PENDING session's new reason to wait is noted.
Each outcome then goes where the handler's `StatusTransitions` table says.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

from sokovan.common import foresight
from sokovan.common.types import FailureCause, KernelStatus, SchedulingResult, SessionResult, SessionStatus
from sokovan.config.cluster import ClusterConfig, Phase
from sokovan.orchestrator.classify import Limits, PhaseState, classify, is_expired
from sokovan.orchestrator.schedule.endings import cancelled_result, final_status
from sokovan.orchestrator.schedule.handler import SessionHandler, SessionResultT, TransitionStatus
from sokovan.orchestrator.schedule.kill_grace import kill_grace, terminate_timeout
from sokovan.state.session_reads import SessionWithKernels
from sokovan.state.session_writes import SessionTransition
from sokovan.state.status_info import SessionStatusInfo


def judge(
    handler: SessionHandler,
    result: SessionResultT,
    sessions: Sequence[SessionWithKernels],
    config: ClusterConfig,
    now: dt.datetime,
) -> list[SessionTransition]:
    table = handler.transitions
    by_id = {s.id: s for s in sessions}
    out: list[SessionTransition] = []
    kernel_guard = handler.kernels.statuses if handler.kernels else KernelStatus.non_terminal()
    info: SessionStatusInfo | None

    def add(sid: uuid.UUID, res: SchedulingResult, to: TransitionStatus | None, **kw: Any) -> None:
        out.append(transition(handler, by_id[sid], res, to, **kw))

    for sid in result.successes:
        info = result.success_info.get(sid)
        add(sid, SchedulingResult.SUCCESS, table.success, kernel_expected=kernel_guard, info=info)
    for sid, message in result.failures.items():
        session = by_id[sid]
        verdict = classify(
            PhaseState(session.phase_attempts + 1, session.status_changed_at),
            _limits(handler, session, config),
            now,
        )
        to = {SchedulingResult.GIVE_UP: table.give_up, SchedulingResult.EXPIRED: table.expired}.get(
            verdict, table.need_retry
        )
        if to is not None and to.session == SessionStatus.PENDING:
            info = requeue_info(session, message)
        elif verdict is SchedulingResult.EXPIRED:
            info = timeout_info(session, message)
        else:
            info = give_up_info(session, verdict, message, to)
        add(sid, verdict, to, message=message, bump=True, info=info)
    for sid, rejection in result.rejected.items():
        add(sid, SchedulingResult.GIVE_UP, table.give_up, message=rejection.get("message"), info=rejection)
    attempted = result.attempted
    for session in sessions:
        if session.id in attempted:
            continue
        if handler.expires(session.status) and is_expired(
            session.status_changed_at, now, _limits(handler, session, config).timeout or 0
        ):
            message = f"{session.status} for longer than its {handler.phase} timeout"
            requeue = table.expired is not None and table.expired.session == SessionStatus.PENDING
            info = requeue_info(session, message) if requeue else timeout_info(session, message)
            add(session.id, SchedulingResult.EXPIRED, table.expired, message=message, info=info)
        elif session.id in result.skipped:
            reason = result.skipped[session.id]
            ahead = result.info.get(session.id)  # foresight, when this cycle computed it
            if session.status == SessionStatus.PENDING and (
                session.status_info.get("pending_reason") != reason
                or (ahead is not None and foresight.changed(session.status_info, ahead, now))
            ):
                add(
                    session.id,
                    SchedulingResult.SKIPPED,
                    None,
                    message=reason,
                    info={**(ahead or {}), "pending_reason": reason},
                )
                if ahead is not None and foresight.RESERVATION not in ahead:
                    out[-1] = dataclasses.replace(out[-1], drop_info=frozenset({foresight.RESERVATION}))
    return out


def _limits(handler: SessionHandler, session: SessionWithKernels, config: ClusterConfig) -> Limits:
    """The phase's limits; a PENDING session waits as long as its scaling group's pending_timeout,
    a TERMINATING one with a kill grace (a preemption victim) at least its grace + 30 s."""
    if handler.phase is None:
        return Limits()
    limit = config.phases.get(handler.phase)
    timeout = session.pending_timeout if session.status == SessionStatus.PENDING else limit.timeout
    if handler.phase == Phase.TERMINATE:
        timeout = terminate_timeout(timeout, kill_grace(session.status_info))
    return Limits(max_tries=limit.max_tries, timeout=timeout)


def phase_timeout(handler: SessionHandler, config: ClusterConfig) -> float:
    return config.phases.get(handler.phase).timeout if handler.phase is not None else 0


def transition(
    handler: SessionHandler,
    session: SessionWithKernels,
    res: SchedulingResult,
    to: TransitionStatus | None,
    *,
    message: str | None = None,
    info: SessionStatusInfo | None = None,
    bump: bool = False,
    kernel_expected: frozenset[KernelStatus] | None = None,
) -> SessionTransition:
    to_status = to.session if to else None
    kernel_to = to.kernel if to else None
    session_result: SessionResult | None = None
    merged: SessionStatusInfo = {**session.status_info, **(info or {})}
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
        expected=handler.targets,
        to_status=to_status,
        handler=handler.name,
        result=res,
        kernel_to=kernel_to,
        kernel_expected=kernel_expected,
        session_result=session_result,
        status_info=info,
        message=message,
        attempt=session.phase_attempts + (1 if bump else 0),
        bump_attempts=bump,
    )


def give_up_info(
    session: SessionWithKernels, verdict: SchedulingResult, message: str, to: TransitionStatus | None
) -> SessionStatusInfo | None:
    """Giving up ends a session with AGENT_TRANSIENT, unless it already carries a cause (e.g. the
    user's request to terminate it): that cause stays."""
    if verdict is not SchedulingResult.GIVE_UP or to is None or to.session is None:
        return None
    if to.session.is_terminal:
        if "cause" in session.status_info:
            return {"gave_up": message}
        return {"cause": FailureCause.AGENT_TRANSIENT.value, "message": message}
    return {"last_failure": message}


def requeue_info(session: SessionWithKernels, message: str) -> SessionStatusInfo:
    """A session sent back to PENDING: why, and the agents it failed on, which the next placement
    avoids unless no other agent fits. No cause: it has not failed, it is rescheduled."""
    agents = sorted({k.agent_id for k in session.kernels if k.agent_id is not None})
    return {"requeued": {"from": session.status.value, "reason": message}, "avoid_agents": agents}


def timeout_info(session: SessionWithKernels, message: str) -> SessionStatusInfo:
    """A timeout is the cause unless the session already carries one (e.g. the user's request)."""
    if "cause" in session.status_info:
        return {"timeout": message}
    return {"cause": FailureCause.SCHEDULER_TIMEOUT.value, "message": message}
