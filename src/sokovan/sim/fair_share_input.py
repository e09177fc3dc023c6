"""The fair-share view on the virtual clock: what `state.fair_share_usage` reads from the database,
built from the simulation's own usage intervals and given to the same pure builder,
`common.fair_share.fair_share_view`.

As the manager does: the owners of waiting sessions count as siblings, the capacity is every
agent's, the weights are the trace's projects' and domains' (1 when absent); and a view is reused
for as long as the manager's process reuses its own (`MAX_AGE` seconds, at most a hundredth of a
half-life), here on the virtual clock. One difference, for speed: the ended runs are summed once,
as each path's decayed usage at the last view, and decayed from there (a halving per half-life)
instead of being read again at every view; the manager drops runs ended more than `HORIZON`
half-lives ago, whose share is below 2^-HORIZON of what they were.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable

from sokovan.common.fair_share import (
    FairShareConfig,
    FairShareView,
    Owner,
    decayed,
    fair_share_view,
    weighted,
)
from sokovan.sim.cluster import SimCluster
from sokovan.sim.sessions import as_uuid
from sokovan.sim.trace import Trace
from sokovan.state.fair_share_usage import MAX_AGE


class FairShareInput:
    """Builds the view for each cycle that needs one (only groups whose scheduler is `fair_share`)."""

    def __init__(self, trace: Trace) -> None:
        self.config: FairShareConfig = trace.fair_share.config() if trace.fair_share else FairShareConfig()
        self.project_weights = {str(as_uuid(p.id)): p.fair_share_weight for p in trace.projects}
        self.domain_weights = {d.name: d.fair_share_weight for d in trace.domains}
        self._last: tuple[dt.datetime, FairShareView] | None = None
        self._ended: dict[tuple[str, ...], float] = {}  # ended runs' decayed usage at `_ended_at`
        self._ended_at: dt.datetime | None = None

    def view(self, cluster: SimCluster, pending: Iterable[Owner], now: dt.datetime) -> FairShareView:
        if self._last is not None:
            at, view = self._last
            age = (now - at).total_seconds()
            if 0 <= age < min(MAX_AGE, self.config.half_life_seconds / 100):
                return view
        view = fair_share_view(
            cluster.live_intervals(),
            self.config,
            now,
            cluster.capacity,
            self.project_weights,
            self.domain_weights,
            sorted(set(pending)),
            base=self._ended_usage(cluster, now),
        )
        self._last = (now, view)
        return view

    def _ended_usage(self, cluster: SimCluster, now: dt.datetime) -> dict[tuple[str, ...], float]:
        """The ended runs' decayed usage at `now` per path: the sum kept so far, decayed since it
        was kept, plus the runs ended since."""
        h = self.config.half_life_seconds
        if self._ended_at is not None and self._ended:
            factor = math.pow(2.0, -(now - self._ended_at).total_seconds() / h)
            self._ended = {path: amount * factor for path, amount in self._ended.items()}
        self._ended_at = now
        for iv in cluster.take_ended():
            amount = decayed(weighted(iv.slots, self.config.weights), iv.start, iv.end, now, h)
            for path in ((iv.domain,), (iv.domain, iv.project), (iv.domain, iv.project, iv.user)):
                self._ended[path] = self._ended.get(path, 0.0) + amount
        return self._ended
