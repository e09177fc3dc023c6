"""Fair share: each domain's, project's and user's decayed usage against the share it is entitled
to (CONTRACT section 16; Slurm's multifactor priority with a decay half-life, ordered as its Fair
Tree does).

Usage is stateless and exact: nothing is accumulated or stored; a view is computed from the
intervals the sessions ran in. A session that held a weighted amount W (the sum over its slots of
amount x weight; memory slots counted in GiB) from `start` to `end` (now while it is live)
contributes its resource-seconds, each decayed by its age with half-life h:

    ∫ W · 2^(-(now-t)/h) dt over [start, end] = W · h/ln2 · (2^(-(now-end)/h) - 2^(-(now-start)/h))

Each level's sum is normalised by what the whole cluster could have used over the same decayed
window, its weighted capacity x h/ln2, so that a usage fraction lies in [0, 1] and decays toward
0: after enough half-lives an owner who ran a lot and one who never ran compare equal.

A level's entitled share is its weight over the weights of its siblings (the children of the
same parent that have usage or pending sessions; users inside a project weigh 1 each), and its
factor is `2^(-usage / share)`: 1 for an owner that used nothing, 0.5 for one that used exactly
its share, toward 0 beyond.

This module is pure (no database, no clock), so the manager (`state.fair_share_usage`) and the
simulator (on a virtual clock) build the same view from the same intervals:

    view = fair_share_view(intervals, config, now, capacity, project_weights, domain_weights, pending)
    domain_f, project_f, user_f = view.factors(domain, project, user)
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Level = Literal["domain", "project", "user"]
LEVELS: tuple[Level, ...] = ("domain", "project", "user")
# (domain, project, user): identifiers, unique at their level (the manager uses the project's and
# the user's UUIDs as text and the domain's name)
Owner = tuple[str, str, str]
Amount = Decimal | float | int

DEFAULT_WEIGHTS: dict[str, float] = {"cuda.device": 10.0, "cpu": 1.0, "mem": 0.25}
GIB = float(2**30)
LN2 = math.log(2)
MAX_HALF_LIFE_HOURS = 87600.0  # ten years
MAX_WEIGHT = 1e6
_SLOT_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")  # as `common.slots` names them


class FairShareConfig(BaseModel):
    """etcd `<prefix>/config/manager/fair_share`: the half-life of past usage and each slot's
    weight (memory slots per GiB; a slot without a weight does not count)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    half_life_hours: float = Field(168.0, gt=0, le=MAX_HALF_LIFE_HOURS, allow_inf_nan=False)
    weights: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_WEIGHTS))

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        for slot, weight in value.items():
            if not _SLOT_NAME.match(slot):
                raise ValueError(f"{slot!r} is not a slot name (like cuda.device, cpu, mem)")
            if not math.isfinite(weight) or not 0 <= weight <= MAX_WEIGHT:
                raise ValueError(f"weight of {slot!r} must be a finite number from 0 to {MAX_WEIGHT:g}")
        return value

    @property
    def half_life_seconds(self) -> float:
        return self.half_life_hours * 3600.0


@dataclass(frozen=True, slots=True)
class UsageInterval:
    """An owner's session holding `slots` (its whole allocation: per kernel x kernels) from
    `start` (when it entered RUNNING) to `end` (None: it still runs)."""

    domain: str
    project: str
    user: str
    slots: Mapping[str, Amount]
    start: dt.datetime
    end: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class Share:
    """One level's standing. `path` is (domain,), (domain, project) or (domain, project, user)."""

    level: Level
    path: tuple[str, ...]
    usage: float  # decayed usage as a fraction of the cluster's decayed capacity
    share: float  # entitled share among its siblings: its weight / theirs
    factor: float  # 2^(-usage/share); 1 = unused


@dataclass(frozen=True)
class FairShareView:
    """Every level's `Share`, by path; an owner absent from it has used nothing (factor 1)."""

    shares: Mapping[tuple[str, ...], Share] = field(default_factory=dict)

    def factor(self, *path: str) -> float:
        found = self.shares.get(path)
        return 1.0 if found is None else found.factor

    def factors(self, domain: str, project: str, user: str) -> tuple[float, float, float]:
        """(domain, project, user) factors of one owner: what the sequencer compares, in order."""
        return (
            self.factor(domain),
            self.factor(domain, project),
            self.factor(domain, project, user),
        )

    def items(self) -> list[Share]:
        """Tree order: each domain, then each of its projects followed by that project's users."""
        return [self.shares[p] for p in sorted(self.shares)]


def is_memory(slot: str) -> bool:
    """Memory slots are stored in bytes and weighed per GiB (as `common.slots` takes units)."""
    return slot == "mem" or slot.endswith(".mem")


def weighted(slots: Mapping[str, Amount], weights: Mapping[str, float]) -> float:
    """Σ amount x weight over the slots that have a weight (memory in GiB)."""
    total = 0.0
    for slot, amount in slots.items():
        weight = weights.get(slot, 0.0)
        if weight:
            total += float(amount) / (GIB if is_memory(slot) else 1.0) * weight
    return total


def decayed(
    amount: float, start: dt.datetime, end: dt.datetime | None, now: dt.datetime, half_life: float
) -> float:
    """∫ amount · 2^(-(now-t)/half_life) dt over [start, min(end, now)] (half_life in seconds)."""
    end = now if end is None or end > now else end
    if start >= end or amount <= 0:
        return 0.0
    newer = math.pow(2.0, -(now - end).total_seconds() / half_life)
    older = math.pow(2.0, -(now - start).total_seconds() / half_life)
    return amount * half_life / LN2 * (newer - older)


def decayed_capacity(capacity: Mapping[str, Amount], config: FairShareConfig) -> float:
    """What the cluster could have used over the decayed window: its weighted capacity held
    forever, Σ capacity x h/ln2."""
    return weighted(capacity, config.weights) * config.half_life_seconds / LN2


def fair_share_view(
    intervals: Iterable[UsageInterval],
    config: FairShareConfig,
    now: dt.datetime,
    capacity: Mapping[str, Amount],
    project_weights: Mapping[str, float] | None = None,
    domain_weights: Mapping[str, float] | None = None,
    pending: Iterable[Owner] = (),
    base: Mapping[tuple[str, ...], float] | None = None,
) -> FairShareView:
    """The view at `now`. `capacity`: the cluster's slots (with no capacity every usage reads 0);
    `project_weights` by project, `domain_weights` by domain (missing or not a positive finite
    number: 1); `pending`: the owners of waiting sessions, which count as siblings even before
    they used anything; `base`: decayed usage at `now` per path (domain, project, user prefixes)
    already summed by the caller, added to the intervals' (the simulator keeps its ended runs so)."""
    h = config.half_life_seconds
    usage: dict[tuple[str, ...], float] = defaultdict(float, base or {})
    for iv in intervals:
        amount = decayed(weighted(iv.slots, config.weights), iv.start, iv.end, now, h)
        for path in _paths((iv.domain, iv.project, iv.user)):
            usage[path] += amount
    for owner in pending:
        for path in _paths(owner):
            usage.setdefault(path, 0.0)
    total = decayed_capacity(capacity, config)
    projects, domains = project_weights or {}, domain_weights or {}

    def weight(path: tuple[str, ...]) -> float:
        given = {1: domains, 2: projects}.get(len(path), {}).get(path[-1], 1.0)
        return given if math.isfinite(given) and given > 0 else 1.0

    siblings: dict[tuple[str, ...], float] = defaultdict(float)
    for path in usage:
        siblings[path[:-1]] += weight(path)
    shares: dict[tuple[str, ...], Share] = {}
    for path, used in usage.items():
        fraction = used / total if total > 0 else 0.0
        share = weight(path) / siblings[path[:-1]]
        shares[path] = Share(LEVELS[len(path) - 1], path, fraction, share, math.pow(2.0, -fraction / share))
    return FairShareView(shares)


def _paths(owner: Owner) -> tuple[tuple[str, ...], ...]:
    domain, project, user = owner
    return (domain,), (domain, project), (domain, project, user)
