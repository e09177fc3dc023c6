"""A preemption victim's kill grace as the TERMINATE phase sees it (CONTRACT section 9).

A victim goes TERMINATING with `status_info.kill_grace` (`sokovan.common.preemption.KILL_GRACE`):
the seconds its kernels get between SIGTERM and SIGKILL. `TerminateSessions` sends it with the
destroy, re-sends SIGKILL to a straggler only once the grace has passed (`force_after`), and the
TERMINATE timeout of such a session is never shorter than the grace plus `TIMEOUT_SLACK`
(`terminate_timeout`), so a victim within its grace is neither killed nor ended early. A session
without it is handled exactly as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sokovan.common.preemption import KILL_GRACE, MAX_GRACE_PERIOD

FORCE_SLACK = 5.0  # seconds past the grace before a straggler's kernels are sent SIGKILL again
TIMEOUT_SLACK = 30.0  # seconds past the grace before the TERMINATE phase times out


def kill_grace(status_info: Mapping[str, Any]) -> float | None:
    """The session's kill grace in seconds (bounded to 0 to MAX_GRACE_PERIOD), or None when it has
    none or it is not a number."""
    value = status_info.get(KILL_GRACE)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return min(max(float(value), 0.0), MAX_GRACE_PERIOD)


def force_after(default: float, grace: float | None) -> float:
    """Seconds in TERMINATING before a straggler's kernels get a forced destroy: never within
    the grace."""
    return default if grace is None else max(default, grace + FORCE_SLACK)


def terminate_timeout(default: float, grace: float | None) -> float:
    """The TERMINATE phase's timeout of a session (0: none): at least its grace + TIMEOUT_SLACK."""
    if grace is None or default <= 0:
        return default
    return max(default, grace + TIMEOUT_SLACK)
