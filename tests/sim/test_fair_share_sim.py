"""Fair share on the virtual clock: the simulator gives the `fair_share` scheduler the decayed
usage of its own runs (`sim.fair_share_input`), so past usage orders the queue, and stops
mattering after enough half-lives (CONTRACT section 16; issue 37's first "Done when")."""

from __future__ import annotations

from sokovan.sim.engine import Combination, simulate
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
