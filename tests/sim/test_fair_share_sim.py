"""Fair share on the virtual clock: the simulator gives the `fair_share` scheduler the decayed
usage of its own runs (`sim.fair_share_input`), so past usage orders the queue, and stops
mattering after enough half-lives (CONTRACT section 16; issue 37's first "Done when")."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

import pytest

from sokovan.common.fair_share import FairShareView, Owner, UsageInterval, fair_share_view
from sokovan.sim.cluster import SimCluster
from sokovan.sim.engine import Combination, simulate
from sokovan.sim.fair_share_input import FairShareInput
from sokovan.sim.synthetic import synthetic_trace
from sokovan.sim.trace import Trace, TraceFairShare
from tests.sim.handmade import session, trace

HOUR = 3600.0


def _queue_after(gap_hours: float) -> Trace:
    """alice holds the whole agent for an hour; `gap_hours` later carol's session holds it 100 s,
    during which alice's and then bob's sessions arrive and wait."""
    t0 = HOUR + gap_hours * HOUR
    t = trace(
        [
            session("past", 0, 4, HOUR),
            session("blocker", t0, 4, 100, user="carol"),
            session("a1", t0 + 1, 4, 10),
            session("b1", t0 + 2, 4, 10, user="bob"),
        ],
        until=t0 + 200,
    )
    t.fair_share = TraceFairShare(half_life_hours=1.0, weights={"cpu": 1.0})
    return t


def _order(t: Trace, policy: str) -> list[str]:
    return [r.sim.trace.id for r in simulate(t, Combination(policy)).starts]


def test_the_user_without_past_usage_goes_first() -> None:
    t = _queue_after(0.0)
    assert _order(t, "fifo") == ["past", "blocker", "a1", "b1"]
    assert _order(t, "fair_share") == ["past", "blocker", "b1", "a1"]


def test_after_enough_half_lives_the_order_is_creation_order_again() -> None:
    t = _queue_after(20.0)  # twenty half-lives: alice's hour has all but decayed
    assert _order(t, "fair_share") == ["past", "blocker", "a1", "b1"]


def test_the_kept_sums_give_the_usage_a_fresh_sum_over_every_run_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The simulator keeps the live runs' and the ended runs' decayed usage as running sums
    (`sim.fair_share_input`); at every view, the usage is what `fair_share_view` gives when handed
    every run there has been, as the manager's reader does (short half-life: many rebases)."""
    t = synthetic_trace(600, 40, seed=3)
    t.fair_share = TraceFairShare(half_life_hours=0.25, weights={"cpu": 1.0, "cuda.device": 10.0})
    ended: list[UsageInterval] = []
    seen: set[int] = set()
    compared = 0
    real_view = FairShareInput.view

    def checked(
        self: FairShareInput, cluster: SimCluster, pending: Callable[[], Iterable[Owner]], now: dt.datetime
    ) -> FairShareView:
        nonlocal compared
        ended.extend(iv for iv in cluster.ended_runs if id(iv) not in seen)  # before the sums take them
        seen.update(id(iv) for iv in cluster.ended_runs)
        view = real_view(self, cluster, pending, now)
        if self._last is not None and self._last[0] == now:  # built now, not reused
            runs = [*cluster.live_intervals(), *ended]
            fresh = fair_share_view(runs, self.config, now, cluster.capacity, pending=pending())
            assert view.shares.keys() == fresh.shares.keys()
            for path, share in fresh.shares.items():
                assert view.shares[path].usage == pytest.approx(share.usage, rel=1e-6, abs=1e-9), path
            compared += 1
        return view

    monkeypatch.setattr(FairShareInput, "view", checked)
    simulate(t, Combination("fair_share"))
    assert compared > 50
