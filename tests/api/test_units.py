"""Table tests for the pure parts: the never-fits check and the RetryPolicy model."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sokovan.common.retry_policy import BackoffStrategy, JitterMode, RetryPolicy
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import ClusterMode
from sokovan.manager.controller.feasibility import AgentCapacity, never_fits


def agent(name: str, cpu: int, mem: str = "8g") -> AgentCapacity:
    return AgentCapacity(name, ResourceSlots.parse({"cpu": cpu, "mem": mem}), frozenset({"python:3"}))


TWO = [agent("a", 4), agent("b", 2)]

CASES = [
    ("fits-largest", {"cpu": 4}, 1, ClusterMode.SINGLE_NODE, TWO, None),
    ("too-much-cpu", {"cpu": 5}, 1, ClusterMode.SINGLE_NODE, TWO, "insufficient cpu"),
    ("cluster-on-one-agent", {"cpu": 2}, 3, ClusterMode.SINGLE_NODE, TWO, "insufficient cpu"),
    ("multi-node-fits", {"cpu": 2}, 2, ClusterMode.MULTI_NODE, TWO, None),
    ("multi-node-too-few", {"cpu": 3}, 2, ClusterMode.MULTI_NODE, TWO, "only 1 do"),
    ("unknown-slot", {"cuda.device": 1}, 1, ClusterMode.SINGLE_NODE, TWO, "insufficient cuda.device"),
    ("no-agents", {"cpu": 1}, 1, ClusterMode.SINGLE_NODE, [], "insufficient cpu"),
    (
        "no-single-agent-has-all",
        {"cpu": 4, "mem": "8g"},
        1,
        ClusterMode.SINGLE_NODE,
        [agent("a", 4, "1g"), agent("b", 1, "8g")],
        "no single agent",
    ),
]


@pytest.mark.parametrize(("name", "req", "size", "mode", "agents", "want"), CASES, ids=[c[0] for c in CASES])
def test_never_fits(
    name: str,
    req: dict[str, object],
    size: int,
    mode: ClusterMode,
    agents: list[AgentCapacity],
    want: str | None,
) -> None:
    got = never_fits(ResourceSlots.parse(req), size, mode, agents)
    if want is None:
        assert got is None
    else:
        assert got is not None and want in got


def test_retry_policy_defaults() -> None:
    p = RetryPolicy()
    assert (p.max_retries, p.retry_delay, p.backoff, p.jitter) == (
        0,
        60.0,
        BackoffStrategy.FIXED,
        JitterMode.DETERMINISTIC,
    )
    assert (p.backoff_multiplier, p.max_retry_delay, p.jitter_ratio, p.emit_retry_events) == (
        2.0,
        3600.0,
        0.25,
        True,
    )
    assert len(p.eligible_causes) == 8  # seed 004's six, NODE_DRAINED and PREEMPTED
    dumped = p.model_dump(mode="json")
    assert dumped["eligible_causes"] == sorted(dumped["eligible_causes"])
    assert RetryPolicy.model_validate(dumped) == p


@pytest.mark.parametrize(
    "bad",
    [
        {"max_retries": -1},
        {"retry_delay": 0},
        {"jitter_ratio": 1.5},
        {"jitter": "sometimes"},
        {"backoff": "linear"},
        {"eligible_causes": ["quota_exceeded"]},
        {"eligible_causes": ["cosmic_rays"]},
        {"max_retry_delay": 10**6},
        {"surprise": 1},
    ],
)
def test_retry_policy_refuses(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RetryPolicy.model_validate(bad)


def test_retry_policy_accepts_upper_case_causes() -> None:
    p = RetryPolicy.model_validate({"eligible_causes": ["KERNEL_NONZERO_EXIT"], "max_retries": 3})
    assert [c.value for c in p.eligible_causes] == ["kernel_nonzero_exit"]
    assert p.total_attempts == 4
