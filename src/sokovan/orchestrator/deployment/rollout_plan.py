"""What one cycle of an update does, decided from a deployment's routes alone (no I/O).

`rolling`: a route of the new revision is added while the live routes stay within `replicas +
max_surge`; an old one is taken out only while at least `replicas - max_unavailable` stay HEALTHY
(so with `max_unavailable` 0, a new replica must be HEALTHY before an old one goes); old routes that
are not HEALTHY serve nothing and go at once. `blue_green`: a whole new set is added; once all of
it is HEALTHY the routing table switches to it in one change and the old set goes. Counts as in
Kubernetes: a percentage of `replicas`, rounded up for the surge and down for the unavailable; both
zero means a surge of one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sokovan.common.types import RouteStatus
from sokovan.state.serving_reads import DeploymentRow, RouteRow


def resolve(value: Any, replicas: int, *, round_up: bool) -> int:
    """`max_surge`/`max_unavailable` ("N" or "P%") as a count of replicas."""
    text = str(value if value is not None else "0").strip()
    if text.endswith("%"):
        share = float(text[:-1]) / 100 * replicas
        return max(0, math.ceil(share) if round_up else math.floor(share))
    return max(0, int(float(text)))


@dataclass
class Step:
    add: int = 0  # new-revision routes to add
    remove: list[tuple[RouteRow, str]] = field(default_factory=list)
    switch: bool = False  # blue-green: serve the new revision from now on
    done: bool = False  # the new revision serves alone, at the target
    progress: str = ""


def _healthy(routes: list[RouteRow]) -> list[RouteRow]:
    return [r for r in routes if r.status == RouteStatus.HEALTHY]


def plan(d: DeploymentRow) -> Step:
    rollout = d.rollout or {}
    strategy = dict(rollout.get("strategy") or {"type": "rolling"})
    live = d.live_routes
    new = [r for r in live if r.revision == d.revision]
    old = [r for r in live if r.revision != d.revision]
    h_new, h_old = _healthy(new), _healthy(old)
    desired = d.replicas
    step = Step(
        progress=f"revision {d.revision}: {len(h_new)} of {desired} HEALTHY; {len(old)} old route(s) left"
    )
    if not old and len(new) == desired:
        # The new revision serves alone only once no old route is left even draining: until then
        # a proxy may still hold a table with it.
        leaving = [r for r in d.routes if r.revision != d.revision and r.status not in RouteStatus.live()]
        if leaving:
            step.progress += f"; {len(leaving)} old route(s) draining"
        else:
            step.done = True
        return step
    if len(new) > desired:  # the target went down meanwhile: the newest surplus goes
        extra = sorted(new, key=lambda r: (r.status == RouteStatus.HEALTHY, -r.created_at.timestamp()))
        step.remove += [(r, f"scaled down to {desired}") for r in extra[: len(new) - desired]]
        gone = {r.id for r, _ in step.remove}
        new = [r for r in new if r.id not in gone]
    why = f"replaced by revision {d.revision}"
    if strategy.get("type") == "blue_green":
        if len(h_new) >= desired:
            step.switch = True
            step.remove += [(r, f"{why} (blue-green switch)") for r in old]
        else:
            step.add = desired - len(new)
        return step
    surge = resolve(strategy.get("max_surge", 1), desired, round_up=True)
    unavailable = resolve(strategy.get("max_unavailable", 0), desired, round_up=False)
    if surge == 0 and unavailable == 0:
        surge = 1
    step.remove += [(r, why) for r in old if r.status != RouteStatus.HEALTHY]
    spare = len(h_new) + len(h_old) - (desired - unavailable)
    if spare > 0:
        step.remove += [(r, why) for r in sorted(h_old, key=lambda r: r.created_at)[:spare]]
    left = len(live) - len(step.remove)
    step.add = max(0, min(desired - len(new), desired + surge - left))
    return step
