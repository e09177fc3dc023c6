"""Quotas: a scope's `total_resource_slots`, checked by placement and by the API at creation."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sokovan.common.slots import ResourceSlots


@dataclass(frozen=True)
class Quota:
    """A `total_resource_slots` limit of one scope (keypair policy, project or domain)."""

    scope: str
    slots: ResourceSlots
    unlimited_unspecified: bool = False

    def excess(self, used: ResourceSlots, request: ResourceSlots) -> list[str]:
        """'cpu 6 > 4' for every slot the request would push past this quota."""
        out = []
        for name, amount in sorted(request.items()):
            if amount <= 0:
                continue
            if name not in self.slots and self.unlimited_unspecified:
                continue
            limit = self.slots.get(name, Decimal(0))
            total = used.get(name, Decimal(0)) + amount
            if total > limit:
                out.append(f"{name} {_fmt(total)} > {_fmt(limit)}")
        return out


def _fmt(value: Decimal) -> str:
    return ResourceSlots({"x": value}).to_json()["x"]


def quota_of(scope: str, raw: dict[str, Any] | None, default_for_unspecified: str) -> Quota | None:
    """A scope's stored `total_resource_slots` as a Quota; None when it has none (unlimited)."""
    if raw is None:
        return None
    slots = ResourceSlots({k: Decimal(v) for k, v in raw.items() if v is not None})
    return Quota(scope, slots, unlimited_unspecified=default_for_unspecified == "unlimited")
