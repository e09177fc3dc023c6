"""RUNNING → TERMINATING: a session that has run longer than its keypair policy's
`max_session_lifetime` is ended with cause LIFETIME_EXCEEDED.

The lifetime counts from when the session entered RUNNING (its `status_changed_at` while RUNNING):
time spent waiting, pulling or starting is not the user's to pay. The policy is the keypair's
current one, read live each cycle; a lifetime of 0 or none is unlimited. Only sessions past their
lifetime are read (the condition is SQL, `narrow`), so the handler costs nothing when none are.
Kernels stay as they are: `TerminateSessions` asks their agents to stop them, as for a user's
terminate, and the session ends ERROR / FAILURE with the cause (never retried: LIFETIME_EXCEEDED
is in NEVER_RETRIED).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import ColumnElement, Interval, exists, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

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


def _lifetime(now: dt.datetime) -> ColumnElement[bool]:
    """The session's keypair policy limits its lifetime, and it has been RUNNING longer."""
    seconds = KeypairResourcePolicy.max_session_lifetime
    return exists().where(
        Keypair.access_key == Session.access_key,
        KeypairResourcePolicy.name == Keypair.resource_policy,
        seconds > 0,
        Session.status_changed_at + func.make_interval(0, 0, 0, 0, 0, 0, seconds, type_=Interval) <= now,
    )


class EnforceLifetime(SessionHandler):
    targets = frozenset({SessionStatus.RUNNING})
    transitions = StatusTransitions(success=TransitionStatus(SessionStatus.TERMINATING, None))

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    def narrow(self, now: dt.datetime) -> ColumnElement[bool]:
        return _lifetime(now)

    async def execute(self, targets: Sequence[SessionWithKernels]) -> SessionResultT:
        result = SessionResultT()
        async with self._engine.connect() as conn:
            rows = await conn.execute(
                select(Keypair.access_key, KeypairResourcePolicy.max_session_lifetime)
                .join(KeypairResourcePolicy, KeypairResourcePolicy.name == Keypair.resource_policy)
                .where(Keypair.access_key.in_({s.access_key for s in targets}))
            )
            lifetimes = {access_key: int(seconds or 0) for access_key, seconds in rows}
        for session in targets:
            lifetime = lifetimes.get(session.access_key, 0)
            if lifetime <= 0:  # the policy changed since the read: nothing to end
                continue
            result.successes.append(session.id)
            result.success_info[session.id] = {
                "cause": FailureCause.LIFETIME_EXCEEDED.value,
                "message": lifetime_exceeded_message(lifetime),
            }
        return result
