"""The pure rules of native session retry: no I/O, no clock, no database.

- `effective_policy`: per-session > project > domain > cluster default, merged field by field.
- `classify_failure`: what ended a session, from its status, result and `status_info.cause`.
- `is_eligible`: whether that cause may be retried under a policy (batch sessions only).
- `retry_delay`: the backoff formula with its jitter, exactly as docs/retry.md states it.

The retry engine decides *when* to call these; everything here is deterministic given its
arguments (random jitter takes the generator as an argument).
"""

from __future__ import annotations

import hashlib
import math
import random
import uuid
from collections.abc import Mapping
from typing import Any

from sokovan.common.retry_policy import (
    MAX_RETRY_DELAY,
    NEVER_RETRIED,
    BackoffStrategy,
    JitterMode,
    RetryEligibleCause,
    RetryPolicy,
)
from sokovan.common.types import FailureCause, SessionResult, SessionStatus, SessionType

__all__ = [
    "HARD_CEILING",
    "NEVER_RETRIED",
    "classify_failure",
    "effective_policy",
    "is_eligible",
    "retry_delay",
]

# No retry is ever delayed longer than this (seconds), whatever max_retry_delay says.
HARD_CEILING: float = MAX_RETRY_DELAY  # 86400.0


# -- defaults precedence ----------------------------------------------------------------------


def _fields(layer: RetryPolicy | Mapping[str, Any] | None) -> dict[str, Any]:
    """The fields a layer sets. A dict is validated first, so a bad layer fails loudly here
    rather than half-applying; a RetryPolicy contributes the fields it was given explicitly."""
    if layer is None:
        return {}
    policy = layer if isinstance(layer, RetryPolicy) else RetryPolicy.model_validate(dict(layer))
    return {name: getattr(policy, name) for name in policy.model_fields_set}


def effective_policy(
    session: dict[str, Any] | None,
    project: dict[str, Any] | None,
    domain: dict[str, Any] | None,
    cluster: RetryPolicy | dict[str, Any] | None,
) -> RetryPolicy:
    """Merge the layers field by field, the most specific first: a field set on the session wins
    over the project's, which wins over the domain's, which wins over the cluster default; a field
    no layer sets takes its built-in default. `eligible_causes` is one field: the most specific layer
    that sets it replaces the whole set (it is not a union). A field given as null counts as set
    (only `max_retry_delay` accepts null: "no cap but the 24 h ceiling").

    Raises `pydantic.ValidationError` (a ValueError) when a layer is not a valid policy."""
    merged: dict[str, Any] = {}
    for layer in (cluster, domain, project, session):  # least specific first; later ones win
        merged.update(_fields(layer))
    return RetryPolicy.model_validate(merged)


# -- classification ---------------------------------------------------------------------------


def _cause(raw: Any, default: FailureCause) -> FailureCause:
    if not isinstance(raw, str) or not raw:
        return default
    try:
        return FailureCause(raw.strip().upper())
    except ValueError:
        return FailureCause.UNKNOWN  # a cause this version does not know is still a failure


def classify_failure(
    status: str, result: str | None, status_info: Mapping[str, Any] | None, session_type: str
) -> FailureCause | None:
    """What ended a session, or None when it did not fail.

    - not terminal yet, or TERMINATED with result SUCCESS: None;
    - TERMINATED otherwise: only a terminate request or a preemption ends a session there
      without SUCCESS, so the cause is `status_info.cause` (PREEMPTED for a preemption),
      USER_CANCELLED when it is missing (never UNKNOWN: that would bring back a session its
      user stopped);
    - ERROR or CANCELLED: `status_info.cause`, UNKNOWN when missing or not a known cause.

    The caller sees USER_CANCELLED & co. and, through `is_eligible`, does not retry them.
    `session_type` does not change the cause (eligibility is where batch-only is enforced).
    """
    del session_type  # part of the engine's interface; the cause is the same for every type
    try:
        st = SessionStatus(str(status).upper())
    except ValueError:
        return None
    if not st.is_terminal:
        return None
    info = status_info or {}
    raw = info.get("cause")
    if st is SessionStatus.TERMINATED:
        if result is not None and str(result).upper() == SessionResult.SUCCESS:
            return None
        return _cause(raw, FailureCause.USER_CANCELLED)
    return _cause(raw, FailureCause.UNKNOWN)


def is_eligible(cause: FailureCause, policy: RetryPolicy, session_type: str) -> bool:
    """Batch sessions only; never a NEVER_RETRIED cause; only a cause in `policy.eligible_causes`.

    (Whether retries are left, `retry_count < max_retries`, and the cluster kill switch are the
    engine's checks.)"""
    if str(session_type).lower() != SessionType.BATCH:
        return False
    try:
        failure = FailureCause(str(cause).upper())
    except ValueError:
        failure = FailureCause.UNKNOWN
    if failure in NEVER_RETRIED:
        return False
    try:
        eligible = RetryEligibleCause(failure.value.lower())
    except ValueError:  # pragma: no cover - every FailureCause is eligible-typed or NEVER_RETRIED
        return False
    return eligible in policy.eligible_causes


# -- backoff ----------------------------------------------------------------------------------


def _cap(policy: RetryPolicy) -> float:
    return min(policy.max_retry_delay or HARD_CEILING, HARD_CEILING)


def _base(policy: RetryPolicy, retry_count: int, cap: float) -> float:
    if policy.backoff == BackoffStrategy.FIXED:
        return policy.retry_delay
    try:
        grown = policy.retry_delay * policy.backoff_multiplier**retry_count
    except OverflowError:  # a huge multiplier or count: past any cap anyway
        grown = math.inf
    return min(grown, cap)


def deterministic_jitter_ms(session_id: uuid.UUID, retry_count: int, base: float, ratio: float) -> int:
    """SHA1 of the failed attempt's id (canonical lowercase UUID) followed by its retry count,
    modulo the jitter span in milliseconds (at least 1, so a zero span gives 0)."""
    h = int(hashlib.sha1(f"{session_id}{retry_count}".encode()).hexdigest(), 16)
    return h % max(1, int(base * ratio * 1000))


def retry_delay(
    policy: RetryPolicy, session_id: uuid.UUID, retry_count: int, rng: random.Random | None = None
) -> float:
    """Seconds to wait before the next attempt after the attempt `session_id` failed.

    `retry_count` is that of the failed attempt (0 for the original session)::

        cap   = max_retry_delay or 24 h
        base  = retry_delay                                            (fixed)
              = min(retry_delay * backoff_multiplier ** retry_count, cap)  (exponential)
        delay = base                                      (jitter none)
              = base + (sha1(f"{id}{retry_count}") % max(1, int(base*ratio*1000))) / 1000
                                                          (jitter deterministic)
              = uniform in [base, base * (1 + ratio))      (jitter random, drawn from `rng`)
        delay = min(delay, cap)
    """
    if retry_count < 0:
        raise ValueError(f"retry_count must be >= 0, got {retry_count}")
    sid = session_id if isinstance(session_id, uuid.UUID) else uuid.UUID(str(session_id))
    cap = _cap(policy)
    base = _base(policy, retry_count, cap)
    ratio = policy.jitter_ratio
    if policy.jitter == JitterMode.DETERMINISTIC:
        delay = base + deterministic_jitter_ms(sid, retry_count, base, ratio) / 1000
    elif policy.jitter == JitterMode.RANDOM:
        draw = (rng or random.Random()).random()  # in [0, 1)
        high = base * (1 + ratio)
        delay = base + base * ratio * draw
        if ratio > 0 and delay >= high:  # float rounding must not reach the open end
            delay = math.nextafter(high, base)
    else:
        delay = base
    return min(delay, cap)
