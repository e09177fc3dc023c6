"""The one place that judges a handler's failures and waits (every coordinator calls it)."""

from __future__ import annotations

import datetime as dt

from sokovan.common.types import SchedulingResult


def classify_failure(attempts_before: int, max_tries: int) -> SchedulingResult:
    """A failed try becomes GIVE_UP once `max_tries` tries in this phase have failed."""
    return SchedulingResult.GIVE_UP if attempts_before + 1 >= max_tries else SchedulingResult.NEED_RETRY


def is_expired(entered_at: dt.datetime, now: dt.datetime, timeout: float) -> bool:
    """Whether a session has stayed in its status longer than `timeout` seconds (0 = never)."""
    return timeout > 0 and (now - entered_at).total_seconds() > timeout
