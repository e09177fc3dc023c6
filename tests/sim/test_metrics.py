"""The measures of a run, on traces small enough to work out by hand (docs/scheduling.md)."""

from __future__ import annotations

import pytest

from sokovan.sim.engine import Combination
from sokovan.sim.metrics import jain, percentile
from sokovan.sim.runs import run_one
from tests.sim.handmade import at, session, trace

# One agent of 4 CPUs, FIFO with backfill:
#   s1 (alice, 4 CPUs, large) arrives at 0, starts at 0, runs 10 s;
#   s2 (alice, 1 CPU) arrives at 1 and s3 (bob, 2 CPUs, large: half the agent) at 2: both wait for s1,
#   start at 10 (s2 first: FIFO) and end at 15. The trace's period is 0-20 s.
TINY = trace([session("s1", 0, 4, 10), session("s2", 1, 1, 5), session("s3", 2, 2, 5, user="bob")])


def test_the_tiny_trace_measures_as_worked_out_by_hand() -> None:
    m = run_one(TINY, Combination("fifo", "backfill"), seed=0)
    assert m.started == 3 and m.not_started == 0
    assert [(p["session"], p["agent"], p["start"]) for p in m.placements] == [
        ("s1", "a0", "2025-03-01T12:00:00Z"),
        ("s2", "a0", "2025-03-01T12:00:10Z"),
        ("s3", "a0", "2025-03-01T12:00:10Z"),
    ]
    # waits 0, 9, 8: sorted 0, 8, 9
    assert m.wait_p50 == pytest.approx(8.0)
    assert m.wait_p95 == pytest.approx(8.9)
    assert m.wait_p99 == pytest.approx(8.98)
    # CPU: 4 held 0-10, 3 held 10-15, none 15-20, of 4 over 20 s; memory: 1g then 2g of 4g
    assert m.utilization == pytest.approx(
        {"cpu": (4 * 10 + 3 * 5) / (4 * 20), "mem": (1 * 10 + 2 * 5) / (4 * 20)}
    )
    # mean waits: alice (0 + 9) / 2 = 4.5, bob 8
    assert m.fairness == pytest.approx((4.5 + 8) ** 2 / (2 * (4.5**2 + 8**2)))
    assert m.by_user == {
        "alice": {"mean_wait": 4.5, "started": 2, "waiting": 0},
        "bob": {"mean_wait": 8.0, "started": 1, "waiting": 0},
    }
    # large: s1 (waited 0) and s3 (waited 8)
    assert m.longest_wait_large == pytest.approx(8.0)
    assert (m.policy, m.queue_policy, m.selector) == ("fifo", "backfill", "concentrated")


def test_a_session_that_ran_past_its_max_duration_ends_there_as_the_manager_ends_it() -> None:
    # s1 ran 10 s in the trace but declared 4: the simulation ends it at 4, so s2 starts at 4
    t = trace([session("s1", 0, 4, 10, max_duration=4), session("s2", 1, 4, 1)])
    m = run_one(t, Combination("fifo"), seed=0)
    assert [p["start"] for p in m.placements] == ["2025-03-01T12:00:00Z", "2025-03-01T12:00:04Z"]


def test_a_session_cancelled_while_pending_leaves_at_its_cancel_time_if_still_waiting() -> None:
    # s2 never ran in the trace (cancelled at 5): it still waits for s1 at 5 and leaves; s3 then
    # has the agent at 10. A large session that never starts counts until the run's last event.
    t = trace(
        [
            session("s1", 0, 4, 10),
            session("s2", 1, 4, None, terminated_at=at(5), status="CANCELLED"),
            session("s3", 2, 4, 3),
        ]
    )
    m = run_one(t, Combination("fifo"), seed=0)
    assert [p["session"] for p in m.placements] == ["s1", "s3"]
    assert m.started == 2 and m.not_started == 0


def test_block_keeps_a_small_session_behind_the_one_that_does_not_fit() -> None:
    # s2 (4 CPUs) waits for s1; s3 (1 CPU) would fit beside s1 now: backfill starts it at 2,
    # block keeps it behind s2 (both start at 10)
    t = trace([session("s1", 0, 3, 10), session("s2", 1, 4, 5), session("s3", 2, 1, 5)])
    backfill = run_one(t, Combination("fifo", "backfill"), seed=0)
    block = run_one(t, Combination("fifo", "block"), seed=0)
    assert [(p["session"], p["start"][-3:]) for p in backfill.placements] == [
        ("s1", "00Z"),
        ("s3", "02Z"),
        ("s2", "10Z"),
    ]
    assert [(p["session"], p["start"][-9:]) for p in block.placements] == [
        ("s1", "12:00:00Z"),
        ("s2", "12:00:10Z"),
        ("s3", "12:00:15Z"),
    ]


@pytest.mark.parametrize(
    ("values", "q", "want"),
    [([], 50, None), ([5.0], 99, 5.0), ([1.0, 2.0, 3.0, 4.0], 50, 2.5), ([0.0, 10.0], 95, 9.5)],
)
def test_percentiles_interpolate_between_ranks(values: list[float], q: float, want: float | None) -> None:
    assert percentile(values, q) == (pytest.approx(want) if want is not None else None)


@pytest.mark.parametrize(
    ("values", "want"),
    [([], None), ([0.0, 0.0], 1.0), ([3.0, 3.0, 3.0], 1.0), ([1.0, 0.0, 0.0, 0.0], 0.25)],
)
def test_jain_index(values: list[float], want: float | None) -> None:
    assert jain(values) == want
