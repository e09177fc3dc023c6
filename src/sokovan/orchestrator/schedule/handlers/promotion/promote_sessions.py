"""Promote a session when its kernels meet a condition; its kernels are not changed.

One handler class serves every promotion: what differs is data, a `Promotion` spec (the table
is `promotions.PROMOTIONS`). The condition is decided in SQL when the sessions are read (an idle
cycle reads nothing) and checked again here on the rows read, so the two cannot disagree.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from sqlalchemy import ColumnElement, and_

from sokovan.common.types import SessionStatus
from sokovan.config.cluster import Phase
from sokovan.db.among import among_bound
from sokovan.db.models import Session
from sokovan.orchestrator.schedule.endings import failure_from_kernels
from sokovan.orchestrator.schedule.handler import (
    KernelCondition,
    SessionHandler,
    SessionResultT,
    StatusTransitions,
    TransitionStatus,
)
from sokovan.state.session_queries import Narrowing
from sokovan.state.session_reads import SessionWithKernels, kernels_match


@dataclass(frozen=True)
class Promotion:
    name: str
    targets: frozenset[SessionStatus]
    kernels: KernelCondition
    to: SessionStatus  # TERMINATED means "ended": the cause it carries decides TERMINATED or ERROR
    # The session takes the cause of its first failed kernel with it.
    cause_from_kernels: bool = False
    # A session that waits in one of these longer than `phase`'s timeout ends (TERMINATING).
    expires_in: frozenset[SessionStatus] = frozenset()
    phase: Phase | None = None
    # An extra SQL condition on the sessions read (e.g. PromoteToTerminated leaves requeue victims alone).
    where: Callable[[], ColumnElement[bool]] | None = None
    # Only agents' events meet the kernel condition, and the event path promotes the sessions they
    # touch as they arrive (`event_promotions`): a lane's hinted (short) cycle leaves the promotion
    # to it instead of reading for sessions the event path has already moved or is moving. Should
    # the event path fail, the lane's next long cycle (the safety net) promotes the session.
    followed: bool = False


class PromoteSessions(SessionHandler):
    kernels: KernelCondition

    def __init__(self, spec: Promotion, focus: Collection[uuid.UUID] | None = None) -> None:
        self.name = spec.name
        self.targets = spec.targets
        self.kernels = spec.kernels
        self.phase = spec.phase
        self.expires_in = spec.expires_in
        self.transitions = StatusTransitions(
            success=TransitionStatus(spec.to),
            expired=TransitionStatus(SessionStatus.TERMINATING) if spec.expires_in else None,
        )
        self._spec = spec
        self.followed = spec.followed
        self._focus = list(focus) if focus is not None else None

    def focused(self, session_ids: Collection[uuid.UUID]) -> PromoteSessions:
        """The same promotion for `session_ids` only, and without expiry (run as events arrive)."""
        return PromoteSessions(replace(self._spec, expires_in=frozenset()), focus=session_ids)

    def narrow(self, now: dt.datetime) -> ColumnElement[bool] | None:
        conds = self._conditions(self._focus or [])
        return and_(*conds) if conds else None

    def narrowing(self, now: dt.datetime) -> Narrowing | None:
        """The event path reads several times a second: its statement is kept per promotion, the
        sessions bound at each read."""
        if self._focus is None and self._spec.where is None:
            return None
        params = {"focus": self._focus} if self._focus is not None else {}
        key = (self._spec.name, self._focus is not None)
        return Narrowing(key, lambda: and_(*self._conditions([])), params)

    def _conditions(self, focus: list[uuid.UUID]) -> list[ColumnElement[bool]]:
        conds = [self._spec.where()] if self._spec.where is not None else []
        if self._focus is not None:
            conds.append(among_bound(Session.id, "focus", focus))
        return conds

    async def execute(self, targets: Sequence[SessionWithKernels]) -> SessionResultT:
        result = SessionResultT()
        for session in targets:
            if not kernels_match(session.kernels, self.kernels.statuses, self.kernels.match):
                continue  # read only to be expired
            result.successes.append(session.id)
            info = failure_from_kernels(session.kernels) if self._spec.cause_from_kernels else None
            if info is not None:
                result.success_info[session.id] = info
        return result
