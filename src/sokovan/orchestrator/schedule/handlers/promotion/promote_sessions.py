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

from sqlalchemy import ColumnElement, and_, exists

from sokovan.common.types import SessionStatus
from sokovan.config.cluster import Phase
from sokovan.db.among import among
from sokovan.db.models import Kernel, Session
from sokovan.orchestrator.schedule.endings import failure_from_kernels
from sokovan.orchestrator.schedule.handler import (
    KernelCondition,
    SessionHandler,
    SessionResultT,
    StatusTransitions,
    TransitionStatus,
)
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
    # touch as they arrive (`event_promotions`): a lane's hinted (short) cycle leaves a session
    # whose kernels moved within the last `SETTLE` seconds to it (`settling`), instead of racing it
    # for the same write. Should the event path fail, the session is the lane's once its kernels
    # have settled, and every long cycle's.
    followed: bool = False


# How long a lane leaves a session whose kernels just moved to the event path (see `followed`).
SETTLE = 1.0


def settled(now: dt.datetime) -> ColumnElement[bool]:
    """No kernel of the session moved within the last `SETTLE` seconds before `now`."""
    recent = now - dt.timedelta(seconds=SETTLE)
    return ~exists().where(Kernel.session_id == Session.id, Kernel.status_changed_at > recent)


class PromoteSessions(SessionHandler):
    kernels: KernelCondition

    def __init__(self, spec: Promotion, settle: bool = False) -> None:
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
        self._settle = settle and spec.followed

    def settling(self) -> PromoteSessions:
        """The same promotion leaving the sessions whose kernels just moved to the event path
        (for the lane's hinted cycles; `followed`). Itself when the promotion is not followed."""
        return PromoteSessions(self._spec, settle=True) if self._spec.followed else self

    def focused(self, session_ids: Collection[uuid.UUID]) -> PromoteSessions:
        """The same promotion for `session_ids` only, and without expiry (run as events arrive)."""
        ids = list(session_ids)
        base = self._spec.where

        def where() -> ColumnElement[bool]:
            cond = among(Session.id, ids)
            return cond & base() if base is not None else cond

        return PromoteSessions(replace(self._spec, where=where, expires_in=frozenset()))

    def narrow(self, now: dt.datetime) -> ColumnElement[bool] | None:
        conds = [self._spec.where()] if self._spec.where is not None else []
        if self._settle:
            conds.append(settled(now))
        return and_(*conds) if conds else None

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
