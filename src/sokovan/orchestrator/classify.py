"""The one judgement of a phase: every coordinator calls `classify`.

From what happened in the current phase (attempts that failed — skips never count — and when the
phase began), the phase's limits and now, it says what the coordinator does: NEED_RETRY (stay and
try again), EXPIRED (too long in the phase) or GIVE_UP (too many failed attempts; wins when both
limits are exceeded). A limit of None (or a timeout of 0) is no limit.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sokovan.common.types import SchedulingResult


@dataclass(frozen=True)
class PhaseState:
    attempts: int  # failed attempts in this phase, including the one being judged
    entered_at: dt.datetime


@dataclass(frozen=True)
class Limits:
    max_tries: int | None = None
    timeout: float | None = None  # seconds; None or 0: forever


def classify(state: PhaseState, limits: Limits, now: dt.datetime) -> SchedulingResult:
    if limits.max_tries is not None and state.attempts >= limits.max_tries:
        return SchedulingResult.GIVE_UP
    if is_expired(state.entered_at, now, limits.timeout or 0):
        return SchedulingResult.EXPIRED
    return SchedulingResult.NEED_RETRY


def is_expired(entered_at: dt.datetime, now: dt.datetime, timeout: float) -> bool:
    """Whether a session has stayed in its status longer than `timeout` seconds (0 = never)."""
    return timeout > 0 and (now - entered_at).total_seconds() > timeout
