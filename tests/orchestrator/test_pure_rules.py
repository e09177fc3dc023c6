"""Table-driven tests of the pure rules: failure classification, expiry, kernel matching,
how a session ends, and what each agent event does to a kernel."""

from __future__ import annotations

import datetime as dt

import pytest

from sokovan.common.events import (
    KernelImagePullFailed,
    KernelPrepared,
    KernelPulling,
    KernelRunning,
    KernelTerminated,
)
from sokovan.common.types import KernelStatus as K
from sokovan.common.types import SchedulingResult, SessionResult, SessionStatus
from sokovan.orchestrator.classify import Limits, PhaseState, classify, is_expired
from sokovan.orchestrator.schedule.endings import failure_from_kernels, final_status
from sokovan.state.kernel_events import transition_for
from sokovan.state.session_queries import KernelMatchType
from sokovan.state.session_reads import kernels_match
from tests.orchestrator.factories import T0, kernel

MIN = dt.timedelta(minutes=1)


@pytest.mark.parametrize(
    ("attempts", "minutes_in_phase", "max_tries", "timeout", "want"),
    [
        (5, 1, 5, 900, SchedulingResult.GIVE_UP),  # 5 attempts with a limit of 5
        (0, 1, 5, 900, SchedulingResult.NEED_RETRY),  # 99 skips are no attempts
        (1, 20, 5, 900, SchedulingResult.EXPIRED),  # 20 minutes in a phase with a 900 s timeout
        (5, 20, 5, 900, SchedulingResult.GIVE_UP),  # both exceeded: give up
        (1000, 10_000, None, None, SchedulingResult.NEED_RETRY),  # no limits
        (1000, 10_000, None, 0, SchedulingResult.NEED_RETRY),  # timeout 0 is no timeout
        (2, 1, 3, 900, SchedulingResult.NEED_RETRY),
        (3, 1, 3, 900, SchedulingResult.GIVE_UP),
        (1, 15, 3, 900, SchedulingResult.NEED_RETRY),  # exactly at the timeout is not past it
    ],
)
def test_classify(
    attempts: int, minutes_in_phase: int, max_tries: int | None, timeout: float | None, want: SchedulingResult
) -> None:
    state = PhaseState(attempts=attempts, entered_at=T0)
    assert classify(state, Limits(max_tries=max_tries, timeout=timeout), T0 + minutes_in_phase * MIN) is want


@pytest.mark.parametrize(
    ("elapsed", "timeout", "want"),
    [(10, 0, False), (10, 30, False), (31, 30, True), (10_000, 0, False)],
)
def test_is_expired(elapsed: int, timeout: float, want: bool) -> None:
    assert is_expired(T0, T0 + dt.timedelta(seconds=elapsed), timeout) is want


@pytest.mark.parametrize(
    ("statuses", "check", "match", "want"),
    [
        ([K.RUNNING, K.RUNNING], {K.RUNNING}, KernelMatchType.ALL, True),
        ([K.RUNNING, K.CREATING], {K.RUNNING}, KernelMatchType.ALL, False),
        ([K.RUNNING, K.TERMINATED], {K.TERMINATED}, KernelMatchType.ANY, True),
        ([K.RUNNING, K.RUNNING], {K.TERMINATED}, KernelMatchType.ANY, False),
        ([K.PREPARED, K.PREPARED], {K.PULLING, K.PREPARING}, KernelMatchType.NOT_ANY, True),
        ([K.PREPARED, K.PULLING], {K.PULLING, K.PREPARING}, KernelMatchType.NOT_ANY, False),
    ],
)
def test_kernels_match(statuses: list[K], check: set[K], match: KernelMatchType, want: bool) -> None:
    assert kernels_match([kernel(s) for s in statuses], frozenset(check), match) is want


@pytest.mark.parametrize(
    ("info", "want"),
    [
        ({}, (SessionStatus.TERMINATED, SessionResult.SUCCESS)),
        ({"cause": "USER_CANCELLED"}, (SessionStatus.TERMINATED, None)),
        ({"cause": "KERNEL_NONZERO_EXIT"}, (SessionStatus.ERROR, SessionResult.FAILURE)),
        ({"cause": "SCHEDULER_TIMEOUT"}, (SessionStatus.ERROR, SessionResult.FAILURE)),
    ],
)
def test_final_status(info: dict[str, str], want: tuple[SessionStatus, SessionResult | None]) -> None:
    assert final_status(info) == want


def test_failure_from_kernels_takes_the_failed_kernels_cause() -> None:
    ok = kernel(K.TERMINATED, exit_code=0)
    bad = kernel(K.ERROR, exit_code=3, status_info={"cause": "KERNEL_NONZERO_EXIT", "message": "exit 3"})
    assert failure_from_kernels([ok]) is None
    info = failure_from_kernels([ok, bad])
    assert info is not None
    assert info["cause"] == "KERNEL_NONZERO_EXIT"
    assert info["exit_code"] == 3


KID = "6f1c1c6e-3c1a-4c53-9c1e-5d0f3b7b9a01"
SID = "0b5f8f36-5a3b-4f8e-8c39-1a6a4f0a5c11"
common = {"agent_id": "a1", "kernel_id": KID, "session_id": SID}


@pytest.mark.parametrize(
    ("event", "from_ok", "from_stale", "to", "cause"),
    [
        (KernelPulling(**common), K.PREPARING, K.RUNNING, K.PULLING, None),
        (KernelPrepared(**common), K.PULLING, K.CREATING, K.PREPARED, None),
        (KernelImagePullFailed(message="no", **common), K.PULLING, K.RUNNING, K.ERROR, "IMAGE_PULL_FAILURE"),
        (KernelRunning(**common), K.CREATING, K.TERMINATED, K.RUNNING, None),
        (KernelRunning(**common), K.PREPARED, K.PULLING, K.RUNNING, None),
        (KernelTerminated(exit_code=0, **common), K.RUNNING, K.TERMINATED, K.TERMINATED, None),
        (KernelTerminated(exit_code=3, **common), K.RUNNING, K.ERROR, K.ERROR, "KERNEL_NONZERO_EXIT"),
        (KernelTerminated(exit_code=137, reason="oom", **common), K.RUNNING, K.ERROR, K.ERROR, "OOM_KILLED"),
        (
            KernelTerminated(exit_code=143, reason="destroyed", **common),
            K.TERMINATING,
            K.ERROR,
            K.TERMINATED,
            None,
        ),
        (KernelTerminated(reason="unknown", **common), K.PREPARED, K.TERMINATED, K.TERMINATED, None),
        (KernelTerminated(reason="lost", **common), K.RUNNING, K.ERROR, K.ERROR, "AGENT_TRANSIENT"),
    ],
)
def test_kernel_event_transitions(event: object, from_ok: K, from_stale: K, to: K, cause: str | None) -> None:
    t = transition_for(event)  # type: ignore[arg-type]
    assert t is not None
    assert from_ok in t.expected
    assert from_stale not in t.expected
    assert t.to_status is to
    assert t.agent_id == "a1"
    assert (t.status_info or {}).get("cause") == cause


def test_kernel_event_with_bad_kernel_id_is_ignored() -> None:
    assert transition_for(KernelRunning(agent_id="a1", kernel_id="nope", session_id=SID)) is None


def test_a_batch_collapses_steps_the_next_event_makes_moot() -> None:
    from sokovan.state.kernel_events import _coalesce

    batch = [
        transition_for(KernelPulling(**common)),
        transition_for(KernelPrepared(**common)),
        transition_for(KernelRunning(**common)),
        transition_for(KernelTerminated(exit_code=3, **common)),
    ]
    kept = _coalesce([t for t in batch if t is not None])
    # pulling folds into prepared (which accepts PULLING and everything pulling accepted);
    # prepared stays (running does not accept a kernel still pulling, so folding it would let
    # a kernel skip its start); running folds into the terminal event, which accepts any live
    # status; the exit code survives.
    assert [t.to_status for t in kept] == [K.PREPARED, K.ERROR]
    assert kept[-1].exit_code == 3
