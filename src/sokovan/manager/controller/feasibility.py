"""Can a session ever be placed? Pure checks over the agents' total capacity (not what is free now).

A session that cannot be placed *now* waits in PENDING; one that no agent could ever hold is refused
at creation. These functions answer the second question and explain which slot is short.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import ClusterMode


@dataclass(frozen=True)
class AgentCapacity:
    """One agent's total capacity, or `count` agents' that share the same one."""

    agent_id: str
    available: ResourceSlots
    images: frozenset[str]
    count: int = 1


def _fmt(slots: ResourceSlots) -> str:
    return ", ".join(f"{k}={v}" for k, v in slots.to_json().items())


def _short_slots(need: ResourceSlots, agents: Sequence[AgentCapacity]) -> list[str]:
    """For each slot no agent has enough of: what is needed and the most any agent has."""
    out = []
    for slot, amount in sorted(need.items()):
        best = max((a.available.get(slot, Decimal(0)) for a in agents), default=Decimal(0))
        if amount > 0 and amount > best:
            need_s = ResourceSlots({slot: amount}).to_json()[slot]
            best_s = ResourceSlots({slot: best}).to_json()[slot]
            out.append(f"insufficient {slot}: needs {need_s}, the largest agent has {best_s}")
    return out


def never_fits(
    per_kernel: ResourceSlots,
    cluster_size: int,
    mode: ClusterMode,
    agents: Sequence[AgentCapacity],
) -> str | None:
    """None when some placement could exist on an empty cluster; otherwise why none can."""
    if mode == ClusterMode.SINGLE_NODE:
        need = per_kernel.scaled(cluster_size)
        if any(need.fits_in(a.available) for a in agents):
            return None
        reasons = _short_slots(need, agents) or [f"no single agent has all of {_fmt(need)} at once"]
        return f"single-node, {cluster_size} kernel(s) on one agent: " + "; ".join(reasons)
    fitting = sum(a.count for a in agents if per_kernel.fits_in(a.available))
    if fitting >= cluster_size:
        return None
    head = f"multi-node needs {cluster_size} agents that each fit {_fmt(per_kernel)}, only {fitting} do"
    reasons = _short_slots(per_kernel, agents) if fitting == 0 else []
    return "; ".join([head, *reasons])
