"""RUNNING → TERMINATING: a session that has run longer than its own `max_duration` or its keypair
policy's `max_session_lifetime` is ended with cause LIFETIME_EXCEEDED.

The time counts from when the session entered RUNNING (its `status_changed_at` while RUNNING):
time spent waiting, pulling or starting is not the user's to pay. `max_duration` is the run time
the session declared when it was created (CONTRACT section 16: reservations and start-time
estimates count on it, so it is kept); the policy is the keypair's current one, read live each
cycle, and a lifetime of 0 or none is unlimited. Where both are past, the message names the
smaller. Only sessions past one of them are read (the condition is SQL, `narrow`), so the handler
costs nothing when none are. Kernels stay as they are: `TerminateSessions` asks their agents to
stop them, as for a user's terminate, and the session ends ERROR / FAILURE with the cause (never
retried: LIFETIME_EXCEEDED is in NEVER_RETRIED).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import ColumnElement, Interval, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import InstrumentedAttribute

from sokovan.common.types import FailureCause, SessionStatus
from sokovan.db.models import Keypair, KeypairResourcePolicy, Session
from sokovan.orchestrator.schedule.handler import (
    SessionHandler,
    SessionResultT,
    StatusTransitions,
    TransitionStatus,
)
from sokovan.state.session_reads import SessionWithKernels


def lifetime_exceeded_message(lifetime: int) -> str:
    return f"ran longer than max_session_lifetime ({lifetime} s)"


def duration_exceeded_message(duration: int) -> str:
    return f"ran longer than its max_duration ({duration} s)"


def _past(seconds: InstrumentedAttribute[int | None], now: dt.datetime) -> ColumnElement[bool]:
    return Session.status_changed_at + func.make_interval(0, 0, 0, 0, 0, 0, seconds, type_=Interval) <= now


def _overdue(now: dt.datetime) -> ColumnElement[bool]:
    """The session has been RUNNING longer than its own max_duration, or its keypair policy limits
    its lifetime and it has run longer than that."""
    seconds = KeypairResourcePolicy.max_session_lifetime
    by_policy = exists().where(
        Keypair.access_key == Session.access_key,
        KeypairResourcePolicy.name == Keypair.resource_policy,
        seconds > 0,
        _past(seconds, now),
    )
    return or_(Session.max_duration.is_not(None) & _past(Session.max_duration, now), by_policy)


def overrun(session: SessionWithKernels, lifetime: int, now: dt.datetime) -> str | None:
    """Why `session` must end now (the smaller limit it ran past), or None."""
    ran = (now - session.status_changed_at).total_seconds()
    limits = []
    if session.max_duration is not None and ran >= session.max_duration:
        limits.append((session.max_duration, duration_exceeded_message(session.max_duration)))
    if lifetime > 0 and ran >= lifetime:
        limits.append((lifetime, lifetime_exceeded_message(lifetime)))
    return min(limits)[1] if limits else None


class EnforceLifetime(SessionHandler):
    targets = frozenset({SessionStatus.RUNNING})
    transitions = StatusTransitions(success=TransitionStatus(SessionStatus.TERMINATING, None))

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    def narrow(self, now: dt.datetime) -> ColumnElement[bool]:
        return _overdue(now)

    async def execute(self, targets: Sequence[SessionWithKernels]) -> SessionResultT:
        result = SessionResultT()
        now = dt.datetime.now(dt.UTC)
        async with self._engine.connect() as conn:
            rows = await conn.execute(
                select(Keypair.access_key, KeypairResourcePolicy.max_session_lifetime)
                .join(KeypairResourcePolicy, KeypairResourcePolicy.name == Keypair.resource_policy)
                .where(Keypair.access_key.in_({s.access_key for s in targets}))
            )
            lifetimes = {access_key: int(seconds or 0) for access_key, seconds in rows}
        for session in targets:
            message = overrun(session, lifetimes.get(session.access_key, 0), now)
            if message is None:  # the policy changed since the read: nothing to end
                continue
            result.successes.append(session.id)
            result.success_info[session.id] = {
                "cause": FailureCause.LIFETIME_EXCEEDED.value,
                "message": message,
            }
        return result
