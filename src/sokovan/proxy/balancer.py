"""Which replica a request goes to: round robin over a deployment's HEALTHY routes.

The routing table (as last applied) says which endpoints are HEALTHY, and what else the proxy must
know of each deployment (`entry`: its id, token digest, limits, autoscaling). Locally, an endpoint whose
own latest probe failed, or whose connection just failed, is skipped (passive ejection) as long as
another one remains; it is still tried last, before the proxy gives up. `candidates()` gives the
order to try for one request: each endpoint at most once.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from sokovan.bus.routing import DeploymentEntry, RoutingTable

UNKNOWN = "(unknown)"  # the metrics label of a deployment the table has no entry for


@dataclass
class Balancer:
    # Endpoints to skip while others remain; shared with the prober, which clears an endpoint on a pass.
    failing: set[str] = field(default_factory=set)
    table: RoutingTable | None = None
    _known: frozenset[str] = field(default=frozenset(), init=False)
    _turns: dict[str, itertools.count[int]] = field(default_factory=dict, init=False)

    def apply(self, table: RoutingTable) -> None:
        self.table = table
        self._known = frozenset(table.routes) | set(table.deployments) | {p.deployment for p in table.probes}
        # An endpoint nobody probes would never be cleared: its ejection lasts until the next table.
        self.failing.intersection_update({p.endpoint for p in table.probes})
        for name in list(self._turns):
            if name not in table.routes:
                del self._turns[name]

    @property
    def healthy_routes(self) -> int:
        return sum(len(e) for e in self.table.routes.values()) if self.table else 0

    def knows(self, deployment: str) -> bool:
        """A deployment the table mentions (an entry, HEALTHY routes or routes being probed)."""
        return deployment in self._known

    def entry(self, deployment: str) -> DeploymentEntry | None:
        """The deployment's entry; None for a name the table has none for (an older table)."""
        return self.table.deployments.get(deployment) if self.table else None

    def label(self, deployment: str) -> str:
        """What metrics call the deployment: its id, never its name."""
        entry = self.entry(deployment)
        return str(entry.id) if entry is not None else UNKNOWN

    def candidates(self, deployment: str) -> list[str]:
        """The endpoints to try, in order: the next in turn first, the locally ejected last."""
        endpoints = list(dict.fromkeys(self.table.routes.get(deployment, []))) if self.table else []
        if not endpoints:
            return []
        preferred = [e for e in endpoints if e not in self.failing] or endpoints
        turn = next(self._turns.setdefault(deployment, itertools.count())) % len(preferred)
        rest = [e for e in endpoints if e not in preferred]
        return preferred[turn:] + preferred[:turn] + rest

    def mark_failed(self, endpoint: str) -> None:
        """The connection to `endpoint` failed: skip it until its next passing probe."""
        self.failing.add(endpoint)
