"""What one simulated run is measured by (docs/scheduling.md, "The what-if simulator").

- wait: start - `created_at`, in seconds, over the sessions that started; p50/p95/p99 by linear
  interpolation between the closest ranks (as numpy's default).
- utilization per slot type: what the live kernels hold over the cluster's capacity, time-weighted
  over the trace's period (`since` to `until` of its header, else its first to its last arrival),
  the same period for every run, so a policy that leaves work for later scores lower. The series
  (each change) is kept for the report's charts.
- started: the sessions that started.
- fairness: Jain's index over the users' mean waits, (Σx)² / (n·Σx²) over the n users with a
  started session: 1 when every user waited as long on average, toward 1/n when one user did all
  the waiting; 1 when nobody waited.
- longest_wait_large: the longest wait of a large session, one whose whole request is at least
  half of its group's largest agent in some slot (the 8-GPU job on 8-GPU agents). A large session
  that never started counts with its wait until the run's last event (a lower bound): starving is
  what this is meant to show. None when the trace has no large session.
- by_user: each user's mean wait, sessions started and sessions still waiting at the end.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sokovan.common.foresight import iso
from sokovan.common.slots import ResourceSlots
from sokovan.sim.engine import Outcome
from sokovan.sim.sessions import SimSession
from sokovan.sim.trace import Trace


@dataclass
class RunMetrics:
    policy: str
    queue_policy: str
    selector: str
    wait_p50: float | None
    wait_p95: float | None
    wait_p99: float | None
    utilization: dict[str, float]
    started: int
    fairness: float | None
    longest_wait_large: float | None
    placements: list[dict[str, Any]]
    by_user: dict[str, dict[str, float | int | None]]
    not_started: int
    # for the report (not in the JSON): every wait, and (hours from the period's start, {slot: fraction})
    waits: list[float] = field(default_factory=list)
    series: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    seconds: float = 0.0  # how long the run took (wall clock)

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "queue_policy": self.queue_policy,
            "selector": self.selector,
            "wait_p50": _round(self.wait_p50),
            "wait_p95": _round(self.wait_p95),
            "wait_p99": _round(self.wait_p99),
            "utilization": {k: round(v, 4) for k, v in self.utilization.items()},
            "started": self.started,
            "fairness": _round(self.fairness, 4),
            "longest_wait_large": _round(self.longest_wait_large),
            "not_started": self.not_started,
            "by_user": self.by_user,
            "placements": self.placements,
        }

    @property
    def label(self) -> str:
        return f"{self.policy} / {self.queue_policy} / {self.selector}"


def _round(value: float | None, places: int = 3) -> float | None:
    return None if value is None else round(value, places)


def percentile(ordered: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) of sorted values, interpolated linearly; None for none."""
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def jain(values: Sequence[float]) -> float | None:
    if not values:
        return None
    squares = sum(v * v for v in values)
    if squares == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * squares)


def period(trace: Trace) -> tuple[dt.datetime, dt.datetime] | None:
    """The period utilization is measured over (see the module's docstring)."""
    arrivals = [s.created_at for s in trace.sessions]
    start = trace.header.since or (min(arrivals) if arrivals else None)
    end = trace.header.until or (max(arrivals) if arrivals else None)
    if start is None or end is None or end <= start:
        return None
    return start, end


def large_sessions(trace: Trace, sessions: Sequence[SimSession]) -> set[uuid.UUID]:
    """The sessions asking at least half of their group's largest agent in some slot."""
    biggest: dict[str, dict[str, Decimal]] = defaultdict(dict)
    for a in trace.agents:
        most = biggest[a.scaling_group]
        for slot, amount in a.available.items():
            most[slot] = max(most.get(slot, Decimal(0)), amount)
    out = set()
    for sim in sessions:
        most = biggest.get(sim.spec.scaling_group, {})
        asked: ResourceSlots = sim.spec.requested_slots
        if any(v > 0 and most.get(k, Decimal(0)) > 0 and 2 * v >= most[k] for k, v in asked.items()):
            out.add(sim.spec.id)
    return out


def measure(outcome: Outcome, queue_policy: str, selector: str) -> RunMetrics:
    trace = outcome.trace
    starts = outcome.starts
    waits = sorted(max((r.start - r.sim.trace.created_at).total_seconds(), 0.0) for r in starts)
    started_ids = {r.sim.spec.id for r in starts}
    gone = started_ids | set(outcome.rejected) | outcome.withdrawn
    never = [s for s in outcome.sessions if s.spec.id not in gone]
    end = outcome.end

    per_user: dict[str, list[float]] = defaultdict(list)
    for r in starts:
        per_user[r.sim.trace.owner].append(max((r.start - r.sim.trace.created_at).total_seconds(), 0.0))
    waiting: dict[str, int] = defaultdict(int)
    for s in never:
        waiting[s.trace.owner] += 1
    by_user: dict[str, dict[str, float | int | None]] = {}
    for user in sorted(set(per_user) | set(waiting)):
        w = per_user.get(user, [])
        by_user[user] = {
            "mean_wait": round(sum(w) / len(w), 3) if w else None,
            "started": len(w),
            "waiting": waiting.get(user, 0),
        }

    large = large_sessions(trace, outcome.sessions)
    large_waits = [
        (r.start - r.sim.trace.created_at).total_seconds() for r in starts if r.sim.spec.id in large
    ]
    if end is not None:
        large_waits += [(end - s.trace.created_at).total_seconds() for s in never if s.spec.id in large]

    utilization, series = _utilization(outcome)
    return RunMetrics(
        policy=outcome.combination.policy,
        queue_policy=queue_policy,
        selector=selector,
        wait_p50=percentile(waits, 50),
        wait_p95=percentile(waits, 95),
        wait_p99=percentile(waits, 99),
        utilization=utilization,
        started=len(starts),
        fairness=jain([sum(w) / len(w) for w in per_user.values()]),
        longest_wait_large=max(large_waits, default=None),
        placements=[
            {"session": r.sim.trace.id, "agent": r.agents[0], "start": iso(r.start)}
            | ({"agents": list(r.agents)} if len(r.agents) > 1 else {})
            for r in starts
        ],
        by_user=by_user,
        not_started=len(never),
        waits=waits,
        series=series,
    )


def _utilization(outcome: Outcome) -> tuple[dict[str, float], list[tuple[float, dict[str, float]]]]:
    """The time-weighted mean over the trace's period, and the series (hours from its start)."""
    capacity = outcome.capacity
    span = period(outcome.trace)
    if span is None or not capacity:
        return dict.fromkeys(capacity, 0.0), []
    start, end = span
    series = [
        ((t - start).total_seconds() / 3600, {k: used.get(k, 0.0) / cap for k, cap in capacity.items()})
        for t, used in outcome.usage
    ]
    totals = dict.fromkeys(capacity, 0.0)
    level: dict[str, float] = {}
    for t, used in outcome.usage:  # what was held when the period began
        if t > start:
            break
        level = used
    changes: list[tuple[dt.datetime, dict[str, float] | None]] = [
        *[(t, u) for t, u in outcome.usage if start < t < end],
        (end, None),
    ]
    since = start
    for t, change in changes:  # `level` holds from `since` until `t`
        width = (t - since).total_seconds()
        for k in capacity:
            totals[k] += level.get(k, 0.0) * width
        if change is not None:
            level = change
            since = t
    length = (end - start).total_seconds()
    return {k: totals[k] / (capacity[k] * length) for k in capacity}, series
