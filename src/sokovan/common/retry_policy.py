"""The per-session retry policy of native session retry: what a failed session's retry looks like.

Only the model and its validation live here; classification, backoff and the retry handler
build on it. A policy is plain data, so it serialises to JSON for the sessions table, etcd and
the API alike.
"""

from __future__ import annotations

import enum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    field_serializer,
    field_validator,
)

from sokovan.common.types import FailureCause

MAX_RETRY_DELAY = 24 * 3600.0  # the hard ceiling of any retry delay, in seconds
MAX_RETRIES_LIMIT = 100  # a guard against retry storms from a typo


class BackoffStrategy(enum.StrEnum):
    FIXED = "fixed"
    EXPONENTIAL = "exponential"


class JitterMode(enum.StrEnum):
    NONE = "none"
    DETERMINISTIC = "deterministic"
    RANDOM = "random"


class RetryEligibleCause(enum.StrEnum):
    AGENT_TRANSIENT = "agent_transient"
    SCHEDULER_TIMEOUT = "scheduler_timeout"
    IMAGE_PULL_FAILURE = "image_pull_failure"
    KERNEL_NONZERO_EXIT = "kernel_nonzero_exit"
    OOM_KILLED = "oom_killed"
    UNKNOWN = "unknown"
    NODE_DRAINED = "node_drained"
    PREEMPTED = "preempted"

    @classmethod
    def defaults(cls) -> frozenset[RetryEligibleCause]:
        return frozenset(cls)


# Causes that are never retried, whatever a policy says: they are permanent by definition (a
# user's cancel, a request that can never be valid, a quota, and a dependency that ended badly
# stays ended; a session ended for running past its max_session_lifetime would only do so again).
# None of them is a RetryEligibleCause, so no policy can make one eligible.
NEVER_RETRIED: frozenset[FailureCause] = frozenset(
    {
        FailureCause.USER_CANCELLED,
        FailureCause.VALIDATION_ERROR,
        FailureCause.QUOTA_EXCEEDED,
        FailureCause.DEPENDENCY_FAILED,
        FailureCause.LIFETIME_EXCEEDED,
    }
)


class RetryPolicy(BaseModel):
    """Field names and defaults are the native session retry design's; total attempts = 1 + max_retries.

    Every constraint is on one field alone, so merging valid layers field by field (per-session >
    project > domain > cluster) always gives a valid policy. Infinity and NaN are refused.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_retries: NonNegativeInt = Field(default=0, le=MAX_RETRIES_LIMIT)
    retry_delay: PositiveFloat = Field(default=60.0, le=MAX_RETRY_DELAY)
    backoff: BackoffStrategy = BackoffStrategy.FIXED
    backoff_multiplier: PositiveFloat = 2.0
    max_retry_delay: PositiveFloat | None = Field(default=3600.0, le=MAX_RETRY_DELAY)
    jitter: JitterMode = JitterMode.DETERMINISTIC
    jitter_ratio: float = Field(default=0.25, ge=0.0, le=1.0)
    eligible_causes: frozenset[RetryEligibleCause] = Field(default_factory=RetryEligibleCause.defaults)
    emit_retry_events: bool = True

    @field_validator("eligible_causes", mode="before")
    @classmethod
    def _normalise_causes(cls, value: Any) -> Any:
        """Accept `KERNEL_NONZERO_EXIT` as well as `kernel_nonzero_exit`; refuse never-retry causes."""
        if isinstance(value, list | tuple | set | frozenset):
            out = []
            for item in value:
                if not isinstance(item, str):  # (a list here is unhashable: no TypeError, a 422)
                    raise ValueError(f"causes are names, got {item!r:.64}")
                name = item.lower()
                if item.upper() in NEVER_RETRIED:
                    raise ValueError(f"{item!r} is never retried and cannot be made eligible")
                out.append(name)
            return out
        return value

    @field_serializer("eligible_causes")
    def _sorted_causes(self, value: frozenset[RetryEligibleCause]) -> list[str]:
        return sorted(c.value for c in value)

    @property
    def total_attempts(self) -> int:
        return 1 + self.max_retries
