"""The fair-share view on the virtual clock: what `state.fair_share_usage` reads from the database,
built from the simulation's own usage intervals and given to the same pure builder,
`common.fair_share.fair_share_view`.

As the manager does: the owners of waiting sessions count as siblings, the capacity is every
agent's, the weights are the trace's projects' and domains' (1 when absent); and a view is reused
for as long as the manager's process reuses its own (`MAX_AGE` seconds, at most a hundredth of a
half-life), here on the virtual clock.

Two differences, for speed, both the same sums in closed form instead of read again at every view
(`common.fair_share.decayed` is the integral they come from):

- the ended runs are summed once, as each path's decayed usage at the last view, and decayed from
  there (a halving per half-life); the manager drops runs ended more than `HORIZON` half-lives
  ago, whose share is below 2^-HORIZON of what they were;
- the live runs are kept per path as two sums, W = Σ w and E = Σ w·2^((start - ref)/h) (w: a run's
  weighted slots, ref: a reference time), since a live run's decayed usage at `now` is
  w·h/ln2·(1 - 2^(-(now - start)/h)): the path's is h/ln2·(W - 2^(-(now - ref)/h)·E). A run is
  added when it starts and taken out when it ends; ref moves to `now` (the sums read again from
  the live runs) once it is `REBASE` half-lives old, before 2^(...) grows large.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterable

from sokovan.common.fair_share import (
    LN2,
    FairShareConfig,
    FairShareView,
    Owner,
    UsageInterval,
    decayed,
    fair_share_view,
    weighted,
)
from sokovan.sim.cluster import SimCluster
from sokovan.sim.sessions import as_uuid
from sokovan.sim.trace import Trace
from sokovan.state.fair_share_usage import MAX_AGE

REBASE = 32.0  # half-lives after which the live sums' reference time moves to now

Path = tuple[str, ...]


def _paths(iv: UsageInterval) -> tuple[Path, Path, Path]:
    return (iv.domain,), (iv.domain, iv.project), (iv.domain, iv.project, iv.user)


class FairShareInput:
    """Builds the view for each cycle that needs one (only groups whose scheduler is `fair_share`)."""

    def __init__(self, trace: Trace) -> None:
        self.config: FairShareConfig = trace.fair_share.config() if trace.fair_share else FairShareConfig()
        self.project_weights = {str(as_uuid(p.id)): p.fair_share_weight for p in trace.projects}
        self.domain_weights = {d.name: d.fair_share_weight for d in trace.domains}
        self._last: tuple[dt.datetime, FairShareView] | None = None
        self._ended: dict[Path, float] = {}  # ended runs' decayed usage at `_ended_at`
        self._ended_at: dt.datetime | None = None
        self._w: dict[Path, float] = {}  # the live runs' sums (see the module's docstring)
        self._e: dict[Path, float] = {}
        self._ref: dt.datetime | None = None

    def view(
        self, cluster: SimCluster, pending: Callable[[], Iterable[Owner]], now: dt.datetime
    ) -> FairShareView:
        """The view at `now`; `pending` gives the waiting sessions' owners (asked only when a new
        view is built)."""
        if self._last is not None:
            at, view = self._last
            age = (now - at).total_seconds()
            if 0 <= age < min(MAX_AGE, self.config.half_life_seconds / 100):
                return view
        usage = self._ended_usage(cluster, now)
        for path, amount in self._live_usage(cluster, now).items():
            usage[path] = usage.get(path, 0.0) + amount
        view = fair_share_view(
            (),
            self.config,
            now,
            cluster.capacity,
            self.project_weights,
            self.domain_weights,
            sorted(set(pending())),
            base=usage,
        )
        self._last = (now, view)
        return view

    def _ended_usage(self, cluster: SimCluster, now: dt.datetime) -> dict[Path, float]:
        """The ended runs' decayed usage at `now` per path: the sum kept so far, decayed since it
        was kept, plus the runs ended since (a copy); the live sums take in the runs started and
        ended since."""
        h = self.config.half_life_seconds
        if self._ended_at is not None and self._ended:
            factor = math.pow(2.0, -(now - self._ended_at).total_seconds() / h)
            self._ended = {path: amount * factor for path, amount in self._ended.items()}
        self._ended_at = now
        if self._ref is None:
            self._ref = now
        for iv in cluster.take_started():
            self._live(iv, 1.0)
        for iv in cluster.take_ended():
            self._live(iv, -1.0)
            amount = decayed(weighted(iv.slots, self.config.weights), iv.start, iv.end, now, h)
            for path in _paths(iv):
                self._ended[path] = self._ended.get(path, 0.0) + amount
        return dict(self._ended)

    def _live(self, iv: UsageInterval, sign: float) -> None:
        assert self._ref is not None
        w = weighted(iv.slots, self.config.weights)
        e = w * math.pow(2.0, (iv.start - self._ref).total_seconds() / self.config.half_life_seconds)
        for path in _paths(iv):
            self._w[path] = self._w.get(path, 0.0) + sign * w
            self._e[path] = self._e.get(path, 0.0) + sign * e

    def _live_usage(self, cluster: SimCluster, now: dt.datetime) -> dict[Path, float]:
        """The live runs' decayed usage at `now` per path."""
        h = self.config.half_life_seconds
        assert self._ref is not None
        if (now - self._ref).total_seconds() / h > REBASE:
            self._ref, self._w, self._e = now, {}, {}
            for iv in cluster.live_intervals():
                self._live(iv, 1.0)
        older = math.pow(2.0, -(now - self._ref).total_seconds() / h)
        return {path: max(0.0, h / LN2 * (w - older * self._e[path])) for path, w in self._w.items()}
