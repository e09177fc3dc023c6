"""Table tests for the pure rules of native session retry: backoff and jitter, precedence, classification."""

from __future__ import annotations

import hashlib
import random
import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from sokovan.common import retry_policy
from sokovan.common.retry_policy import RetryEligibleCause, RetryPolicy
from sokovan.common.types import FailureCause
from sokovan.orchestrator.retry.policy import (
    HARD_CEILING,
    NEVER_RETRIED,
    classify_failure,
    effective_policy,
    is_eligible,
    retry_delay,
)

SID = uuid.UUID("8f14e45f-ceea-467f-a0f5-5b9c1a3e7d42")
DAY = 86400.0


def policy(**fields: Any) -> RetryPolicy:
    return RetryPolicy.model_validate({"jitter": "none", **fields})


# -- backoff without jitter ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fields", "retry_count", "want"),
    [
        ("fixed, original", {"retry_delay": 30}, 0, 30.0),
        ("fixed ignores the count", {"retry_delay": 30}, 7, 30.0),
        ("fixed above the cap is capped", {"retry_delay": 600, "max_retry_delay": 100}, 0, 100.0),
        ("exponential, original", {"backoff": "exponential", "retry_delay": 10}, 0, 10.0),
        ("exponential, 1st retry failed", {"backoff": "exponential", "retry_delay": 10}, 1, 20.0),
        ("exponential, 3rd retry failed", {"backoff": "exponential", "retry_delay": 10}, 3, 80.0),
        (
            "exponential, multiplier 3",
            {"backoff": "exponential", "retry_delay": 5, "backoff_multiplier": 3},
            2,
            45.0,
        ),
        ("exponential, default cap 1 h", {"backoff": "exponential", "retry_delay": 60}, 10, 3600.0),
        (
            "exponential, own cap",
            {"backoff": "exponential", "retry_delay": 10, "max_retry_delay": 50},
            4,
            50.0,
        ),
        (
            "exponential, no cap: the 24 h ceiling",
            {"backoff": "exponential", "retry_delay": 60, "max_retry_delay": None},
            20,
            DAY,
        ),
        (
            "exponential, overflow is the ceiling",
            {
                "backoff": "exponential",
                "retry_delay": 1,
                "backoff_multiplier": 1e300,
                "max_retry_delay": None,
            },
            5,
            DAY,
        ),
        (
            "multiplier below 1 shrinks",
            {"backoff": "exponential", "retry_delay": 100, "backoff_multiplier": 0.5},
            2,
            25.0,
        ),
    ],
)
def test_backoff(name: str, fields: dict[str, Any], retry_count: int, want: float) -> None:
    assert retry_delay(policy(**fields), SID, retry_count) == pytest.approx(want), name


def test_hard_ceiling_is_24_hours() -> None:
    assert HARD_CEILING == DAY
    assert retry_delay(policy(retry_delay=DAY, max_retry_delay=None), SID, 0) == DAY


def test_negative_retry_count_is_refused() -> None:
    with pytest.raises(ValueError):
        retry_delay(policy(), SID, -1)


# -- deterministic jitter, recomputed here independently --------------------------------------


def expected_deterministic(
    session_id: uuid.UUID, retry_count: int, base: float, ratio: float, cap: float
) -> float:
    digest = hashlib.sha1((str(session_id).lower() + str(retry_count)).encode()).hexdigest()
    span_ms = max(1, int(base * ratio * 1000))
    return min(base + (int(digest, 16) % span_ms) / 1000, cap)


@pytest.mark.parametrize(
    ("fields", "retry_count", "base", "cap"),
    [
        ({}, 0, 60.0, 3600.0),  # the built-in defaults: fixed 60 s, deterministic, ratio 0.25
        ({"retry_delay": 10, "jitter_ratio": 1.0}, 3, 10.0, 3600.0),
        ({"backoff": "exponential", "retry_delay": 10}, 2, 40.0, 3600.0),
        (
            {"backoff": "exponential", "retry_delay": 10, "max_retry_delay": 45},
            2,
            40.0,
            45.0,
        ),  # jitter capped
        ({"retry_delay": 0.001, "jitter_ratio": 0.1}, 0, 0.001, 3600.0),  # span < 1 ms: no jitter
        ({"jitter_ratio": 0}, 5, 60.0, 3600.0),
        ({"backoff": "exponential", "retry_delay": 3600, "max_retry_delay": None}, 9, DAY, DAY),
    ],
)
def test_deterministic_jitter(fields: dict[str, Any], retry_count: int, base: float, cap: float) -> None:
    p = RetryPolicy.model_validate({"jitter": "deterministic", **fields})
    want = expected_deterministic(SID, retry_count, base, p.jitter_ratio, cap)
    got = retry_delay(p, SID, retry_count)
    assert got == pytest.approx(want, abs=1e-9)
    assert base <= got <= cap or got == cap
    assert retry_delay(p, SID, retry_count) == got  # reproducible


def test_deterministic_jitter_is_the_default_and_depends_on_id_and_count() -> None:
    p = RetryPolicy()
    assert p.jitter == "deterministic"
    other = uuid.UUID("00000000-0000-4000-8000-000000000001")
    delays = {retry_delay(p, sid, n) for sid in (SID, other) for n in range(4)}
    assert len(delays) > 1
    for sid in (SID, other):
        for n in range(4):
            assert retry_delay(p, sid, n) == pytest.approx(expected_deterministic(sid, n, 60.0, 0.25, 3600.0))
            assert 60.0 <= retry_delay(p, sid, n) < 75.0


def test_deterministic_jitter_uses_the_canonical_lowercase_id() -> None:
    p = RetryPolicy()
    upper = str(SID).upper()
    assert retry_delay(p, uuid.UUID(upper), 1) == retry_delay(p, SID, 1)


# -- random jitter -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "retry_count", "base"),
    [
        ({"retry_delay": 10, "jitter_ratio": 0.5}, 0, 10.0),
        ({"backoff": "exponential", "retry_delay": 10}, 3, 80.0),
        ({"retry_delay": 100, "jitter_ratio": 1.0}, 1, 100.0),
    ],
)
def test_random_jitter_bounds(fields: dict[str, Any], retry_count: int, base: float) -> None:
    p = RetryPolicy.model_validate({"jitter": "random", **fields})
    rng = random.Random(1234)
    draws = [retry_delay(p, SID, retry_count, rng) for _ in range(500)]
    high = base * (1 + p.jitter_ratio)
    assert all(base <= d < high for d in draws)
    assert max(draws) - min(draws) > (high - base) * 0.5  # it spreads over the range
    again = random.Random(1234)
    assert [retry_delay(p, SID, retry_count, again) for _ in range(500)] == draws  # seeded: reproducible


def test_random_jitter_is_capped() -> None:
    p = RetryPolicy.model_validate(
        {"jitter": "random", "retry_delay": 100, "jitter_ratio": 1, "max_retry_delay": 120}
    )
    rng = random.Random(7)
    assert all(100 <= retry_delay(p, SID, 0, rng) <= 120 for _ in range(200))


class _Top(random.Random):
    def random(self) -> float:
        return 1.0 - 2**-53  # the largest draw below 1


def test_random_jitter_never_reaches_the_open_end() -> None:
    p = RetryPolicy.model_validate({"jitter": "random", "retry_delay": 3, "jitter_ratio": 0.1})
    assert retry_delay(p, SID, 0, _Top()) < 3 * 1.1


# -- precedence --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "session", "project", "domain", "cluster", "want"),
    [
        ("nothing anywhere: built-in", None, None, None, None, {"max_retries": 0, "retry_delay": 60.0}),
        ("cluster only", None, None, None, {"max_retries": 2}, {"max_retries": 2, "retry_delay": 60.0}),
        (
            "cluster as a model",
            None,
            None,
            None,
            RetryPolicy(max_retries=4, retry_delay=9),
            {"max_retries": 4, "retry_delay": 9.0},
        ),
        (
            "domain over cluster",
            None,
            None,
            {"max_retries": 3},
            {"max_retries": 2, "retry_delay": 5},
            {"max_retries": 3, "retry_delay": 5.0},
        ),
        (
            "project over domain",
            None,
            {"max_retries": 1},
            {"max_retries": 3, "jitter": "none"},
            None,
            {"max_retries": 1, "jitter": "none"},
        ),
        (
            "session over all",
            {"max_retries": 5},
            {"max_retries": 1},
            {"max_retries": 3},
            {"max_retries": 2},
            {"max_retries": 5},
        ),
        (
            "field by field",
            {"retry_delay": 1},
            {"backoff": "exponential"},
            {"backoff_multiplier": 3},
            {"max_retries": 2, "max_retry_delay": 100},
            {
                "retry_delay": 1.0,
                "backoff": "exponential",
                "backoff_multiplier": 3.0,
                "max_retries": 2,
                "max_retry_delay": 100.0,
            },
        ),
        (
            "explicit null cap wins",
            {"max_retry_delay": None},
            None,
            None,
            {"max_retry_delay": 50},
            {"max_retry_delay": None},
        ),
        (
            "eligible_causes replaced whole, not merged",
            {"eligible_causes": ["OOM_KILLED"]},
            None,
            None,
            {"eligible_causes": ["agent_transient", "unknown"]},
            {"eligible_causes": frozenset({RetryEligibleCause.OOM_KILLED})},
        ),
        (
            "session asks for zero retries",
            {"max_retries": 0},
            {"max_retries": 3},
            None,
            None,
            {"max_retries": 0},
        ),
        (
            "per-session exponential over a shrinking multiplier",
            {"backoff": "exponential"},
            {"backoff_multiplier": 0.5},
            None,
            None,
            {"backoff": "exponential", "backoff_multiplier": 0.5},
        ),
    ],
)
def test_effective_policy(
    name: str,
    session: dict[str, Any] | None,
    project: dict[str, Any] | None,
    domain: dict[str, Any] | None,
    cluster: RetryPolicy | dict[str, Any] | None,
    want: dict[str, Any],
) -> None:
    got = effective_policy(session, project, domain, cluster)
    assert isinstance(got, RetryPolicy)
    assert {k: getattr(got, k) for k in want} == want, name


def test_effective_policy_with_every_layer_full_takes_the_session() -> None:
    full = RetryPolicy(max_retries=9, retry_delay=2).model_dump(mode="json")
    assert effective_policy(full, {"max_retries": 1}, None, RetryPolicy(max_retries=3)).max_retries == 9


@pytest.mark.parametrize(
    "bad",
    [
        {"max_retries": -1},
        {"jitter_ratio": 2},
        {"retry_delay": DAY + 1},
        {"eligible_causes": ["USER_CANCELLED"]},
        {"x": 1},
    ],
)
def test_effective_policy_refuses_an_invalid_layer(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        effective_policy(None, bad, None, None)


# -- classification and eligibility ------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "result", "info", "want"),
    [
        ("PENDING", None, {}, None),
        ("RUNNING", None, {"cause": "OOM_KILLED"}, None),
        ("TERMINATING", None, {}, None),
        ("TERMINATED", "SUCCESS", {}, None),
        ("TERMINATED", "SUCCESS", {"cause": None}, None),
        ("TERMINATED", None, {"cause": "USER_CANCELLED"}, FailureCause.USER_CANCELLED),
        ("TERMINATED", None, {}, FailureCause.USER_CANCELLED),  # only a terminate request ends there
        ("CANCELLED", None, {"cause": "USER_CANCELLED"}, FailureCause.USER_CANCELLED),
        ("CANCELLED", None, {"cause": "DEPENDENCY_FAILED"}, FailureCause.DEPENDENCY_FAILED),
        ("CANCELLED", None, {"cause": "SCHEDULER_TIMEOUT"}, FailureCause.SCHEDULER_TIMEOUT),
        ("ERROR", "FAILURE", {"cause": "KERNEL_NONZERO_EXIT"}, FailureCause.KERNEL_NONZERO_EXIT),
        ("ERROR", "FAILURE", {"cause": "oom_killed"}, FailureCause.OOM_KILLED),
        ("ERROR", "FAILURE", {"cause": "AGENT_TRANSIENT"}, FailureCause.AGENT_TRANSIENT),
        ("ERROR", "FAILURE", {"cause": "IMAGE_PULL_FAILURE"}, FailureCause.IMAGE_PULL_FAILURE),
        ("ERROR", "FAILURE", {"cause": "QUOTA_EXCEEDED"}, FailureCause.QUOTA_EXCEEDED),
        ("ERROR", "FAILURE", {"cause": "VALIDATION_ERROR"}, FailureCause.VALIDATION_ERROR),
        ("ERROR", "FAILURE", {}, FailureCause.UNKNOWN),
        ("ERROR", "FAILURE", {"cause": "COSMIC_RAYS"}, FailureCause.UNKNOWN),
        ("ERROR", "FAILURE", {"cause": 42}, FailureCause.UNKNOWN),
        ("error", "FAILURE", {"cause": "OOM_KILLED"}, FailureCause.OOM_KILLED),
        ("BOGUS", None, {"cause": "OOM_KILLED"}, None),
    ],
)
def test_classify_failure(
    status: str, result: str | None, info: dict[str, Any], want: FailureCause | None
) -> None:
    assert classify_failure(status, result, info, "batch") is want
    assert classify_failure(status, result, info, "interactive") is want  # the type changes eligibility only


def test_never_retried_set() -> None:
    assert {
        FailureCause.USER_CANCELLED,
        FailureCause.VALIDATION_ERROR,
        FailureCause.QUOTA_EXCEEDED,
        FailureCause.DEPENDENCY_FAILED,
        FailureCause.LIFETIME_EXCEEDED,
    } == NEVER_RETRIED


ALL_ELIGIBLE = RetryPolicy(max_retries=3)
ONLY_OOM = RetryPolicy.model_validate({"max_retries": 3, "eligible_causes": ["OOM_KILLED"]})
NOTHING = RetryPolicy.model_validate({"max_retries": 3, "eligible_causes": []})


@pytest.mark.parametrize(
    ("cause", "pol", "session_type", "want"),
    [
        *[(c, ALL_ELIGIBLE, "batch", True) for c in FailureCause if c not in NEVER_RETRIED],
        *[(c, ALL_ELIGIBLE, "batch", False) for c in sorted(NEVER_RETRIED)],
        (FailureCause.KERNEL_NONZERO_EXIT, ALL_ELIGIBLE, "interactive", False),
        (FailureCause.KERNEL_NONZERO_EXIT, ALL_ELIGIBLE, "inference", False),
        (FailureCause.KERNEL_NONZERO_EXIT, ALL_ELIGIBLE, "BATCH", True),
        (FailureCause.OOM_KILLED, ONLY_OOM, "batch", True),
        (FailureCause.KERNEL_NONZERO_EXIT, ONLY_OOM, "batch", False),
        (FailureCause.UNKNOWN, ONLY_OOM, "batch", False),
        (FailureCause.OOM_KILLED, NOTHING, "batch", False),
    ],
)
def test_is_eligible(cause: FailureCause, pol: RetryPolicy, session_type: str, want: bool) -> None:
    assert is_eligible(cause, pol, session_type) is want


@pytest.mark.parametrize(
    "cause", ["USER_CANCELLED", "validation_error", "QUOTA_EXCEEDED", "dependency_failed"]
)
def test_never_retried_causes_cannot_be_made_eligible(cause: str) -> None:
    with pytest.raises(ValidationError):
        RetryPolicy.model_validate({"eligible_causes": [cause]})


def test_never_retried_is_one_set_that_with_the_eligible_causes_covers_every_cause() -> None:
    assert NEVER_RETRIED is retry_policy.NEVER_RETRIED  # the rules and the policy model share it
    never = {c.value.lower() for c in NEVER_RETRIED}
    eligible = {c.value for c in RetryEligibleCause}
    assert never.isdisjoint(eligible)
    assert never | eligible == {c.value.lower() for c in FailureCause}


@pytest.mark.parametrize(
    "bad",
    [
        {"max_retries": -1},
        {"jitter_ratio": -0.1},
        {"jitter_ratio": 1.01},
        {"retry_delay": DAY + 0.5},
        {"max_retry_delay": DAY * 2},
        {"retry_delay": 0},
        {"backoff_multiplier": 0},
        {"retry_delay": float("inf")},
        {"backoff_multiplier": float("nan")},
    ],
)
def test_out_of_range_policies_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        RetryPolicy.model_validate(bad)
