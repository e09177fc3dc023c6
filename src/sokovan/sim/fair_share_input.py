"""The fair-share view on the virtual clock: what `state.fair_share_usage` reads from the database,
built from the simulation's own usage intervals and given to the same pure builder,
`common.fair_share.fair_share_view`.

As the manager does: the runs still live or ended within `HORIZON` half-lives count, the owners
of waiting sessions count as siblings, the capacity is every agent's, the weights are the trace's
projects' and domains' (1 when absent); and a view is reused for as long as the manager's process
reuses its own (`MAX_AGE` seconds, at most a hundredth of a half-life), here on the virtual clock.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from sokovan.common.fair_share import FairShareConfig, FairShareView, Owner, fair_share_view
from sokovan.sim.cluster import SimCluster
from sokovan.sim.sessions import as_uuid
from sokovan.sim.trace import Trace
from sokovan.state.fair_share_usage import HORIZON, MAX_AGE


class FairShareInput:
    """Builds the view for each cycle that needs one (only groups whose scheduler is `fair_share`)."""

    def __init__(self, trace: Trace) -> None:
        self.config: FairShareConfig = trace.fair_share.config() if trace.fair_share else FairShareConfig()
        self.project_weights = {str(as_uuid(p.id)): p.fair_share_weight for p in trace.projects}
        self.domain_weights = {d.name: d.fair_share_weight for d in trace.domains}
        self._last: tuple[dt.datetime, FairShareView] | None = None

    def view(self, cluster: SimCluster, pending: Iterable[Owner], now: dt.datetime) -> FairShareView:
        if self._last is not None:
            at, view = self._last
            age = (now - at).total_seconds()
            if 0 <= age < min(MAX_AGE, self.config.half_life_seconds / 100):
                return view
        since = now - dt.timedelta(seconds=self.config.half_life_seconds * HORIZON)
        view = fair_share_view(
            cluster.live_intervals(since),
            self.config,
            now,
            cluster.capacity,
            self.project_weights,
            self.domain_weights,
            sorted(set(pending)),
        )
        self._last = (now, view)
        return view
