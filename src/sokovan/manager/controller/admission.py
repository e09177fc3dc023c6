"""Admission: everything a create request (or its dry run) must pass before anything is written.

Each check refuses with a `ControllerError` (4xx) a request that can never be satisfied (unknown
scaling group or image, more than any agent could hold, more than a defined quota allows) or, for
the pending limit, one that may not be queued right now. Waiting for room is not refused here: a
session that fits in principle waits in PENDING.
"""

from __future__ import annotations

import time
import uuid

from sqlalchemy import bindparam, func, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.db.models import Agent, ScalingGroup, Session
from sokovan.manager.controller.errors import (
    Forbidden,
    QuotaExceeded,
    TooManyPending,
    UnknownReference,
    Unsatisfiable,
)
from sokovan.manager.controller.feasibility import AgentCapacity, never_fits
from sokovan.manager.controller.request_bounds import cluster_size_refusal, priority_refusal
from sokovan.manager.controller.session_spec import SessionCreateRequest
from sokovan.manager.repositories.sessions_read import visible
from sokovan.manager.repositories.tenancy import OwnerLimits, Principal, count_pending


async def admit(
    conn: AsyncConnection,
    principal: Principal,
    spec: SessionCreateRequest,
    per_kernel: ResourceSlots,
    limits: OwnerLimits,
    capacity: CapacityCache | None = None,
) -> list[uuid.UUID]:
    """Run every check; returns the de-duplicated dependencies."""
    refusal = priority_refusal(spec.priority, principal.is_admin)
    if refusal is not None:
        raise Forbidden(refusal, errors=[{"field": "priority", "message": refusal, "type": "admin_only"}])
    await check_cluster_size(conn, spec, capacity)
    await check_placeable(conn, spec, per_kernel, capacity)
    violations = quota_violations(limits, per_kernel.scaled(spec.cluster_size))
    if violations:
        raise QuotaExceeded("; ".join(violations))
    await check_pending_limit(conn, principal, limits)
    return await check_dependencies(conn, principal, spec.depends_on)


def quota_violations(limits: OwnerLimits, total: ResourceSlots) -> list[str]:
    """One entry per scope whose defined limits the request alone exceeds, keypair policy first
    (e.g. "keypair policy 'small': cpu 8 > 4"); empty when every scope could hold it."""
    out = []
    for quota in limits.quotas:
        excess = quota.excess(ResourceSlots(), total)
        if quota is limits.policy_quota and limits.max_concurrent_sessions == 0:
            excess.append("max_concurrent_sessions 0")
        if excess:
            out.append(f"{quota.scope}: {', '.join(excess)}")
    if limits.policy_quota is None and limits.max_concurrent_sessions == 0:
        out.insert(0, f"keypair policy {limits.policy_name!r}: max_concurrent_sessions 0")
    return out


async def check_pending_limit(conn: AsyncConnection, principal: Principal, limits: OwnerLimits) -> None:
    cap = limits.max_pending_sessions
    if cap is None:
        return
    pending = await count_pending(conn, principal.access_key)
    if pending >= cap:
        raise TooManyPending(
            f"{pending} session(s) of {principal.access_key} are PENDING; keypair policy "
            f"{limits.policy_name!r} allows {cap}: wait for some to start or cancel them"
        )


class CapacityCache:
    """What `check_placeable` reads — a group's allowed types and its agents' capacity shapes for an
    image — kept for `ttl` seconds, so a burst of creates costs no reads here.

    Only positive answers are kept (the group exists and some agent offers the image): a new group
    or a newly registered image is seen at once, a changed group or agent within `ttl` seconds.
    This check is about what could *ever* fit; what fits now is the scheduler's business."""

    def __init__(self, ttl: float = 2.0) -> None:
        self._ttl = ttl
        self._items: dict[tuple[str, str], tuple[float, list[str], list[AgentCapacity]]] = {}
        self._largest: tuple[float, int] = (0.0, 0)

    async def largest_group(self, conn: AsyncConnection) -> int:
        """How many agents (of any status) the scaling group with the most of them has."""
        expires, count = self._largest
        if expires > time.monotonic():
            return count
        count = int(await conn.scalar(_LARGEST_GROUP) or 0)
        self._largest = (time.monotonic() + self._ttl, count)
        return count

    async def lookup(
        self, conn: AsyncConnection, group: str, image: str
    ) -> tuple[list[str], list[AgentCapacity]] | None:
        """(allowed session types, capacity shapes offering `image`), or None if the group is unknown."""
        hit = self._items.get((group, image))
        if hit is not None and hit[0] > time.monotonic():
            return hit[1], hit[2]
        sg = (await conn.execute(_GROUP_TYPES, {"group": group})).first()
        if sg is None:
            return None
        rows = await conn.execute(_CAPACITY_SHAPES, {"group": group, "image": [image]})
        # Agents of one capacity are one row: a homogeneous fleet of any size costs one row here.
        offering = [
            AgentCapacity(f"{n} agent(s)", ResourceSlots.from_json(slots), frozenset({image}), count=int(n))
            for slots, n in rows
        ]
        allowed = list(sg.allowed_session_types or [])
        if offering:
            self._items[(group, image)] = (time.monotonic() + self._ttl, allowed, offering)
        return allowed, offering


_GROUP_TYPES = select(ScalingGroup.allowed_session_types).where(ScalingGroup.name == bindparam("group"))
_CAPACITY_SHAPES = (
    select(Agent.available_slots, func.count())
    .where(Agent.scaling_group == bindparam("group"), Agent.images.contains(bindparam("image", type_=JSONB)))
    .group_by(Agent.available_slots)
)


_GROUP_SIZES = select(func.count().label("n")).select_from(Agent).group_by(Agent.scaling_group).subquery()
_LARGEST_GROUP = select(func.max(_GROUP_SIZES.c.n))


async def check_cluster_size(
    conn: AsyncConnection, spec: SessionCreateRequest, capacity: CapacityCache | None = None
) -> None:
    """No more kernels than the largest scaling group has agents: a bound on what one request can
    start, whatever its per-kernel slots."""
    if spec.cluster_size <= 1:
        return
    largest = await (capacity or CapacityCache(ttl=0)).largest_group(conn)
    refusal = cluster_size_refusal(spec.cluster_size, largest)
    if refusal is not None:
        raise Unsatisfiable(
            refusal, errors=[{"field": "cluster_size", "message": refusal, "type": "too_large"}]
        )


async def check_placeable(
    conn: AsyncConnection,
    spec: SessionCreateRequest,
    per_kernel: ResourceSlots,
    capacity: CapacityCache | None = None,
) -> None:
    found = await (capacity or CapacityCache(ttl=0)).lookup(conn, spec.scaling_group, spec.image)
    if found is None:
        raise UnknownReference(f"scaling group {spec.scaling_group!r} does not exist")
    allowed, offering = found
    if spec.type.value not in allowed:
        raise Unsatisfiable(
            f"scaling group {spec.scaling_group!r} does not allow {spec.type.value} sessions "
            f"(allowed: {', '.join(allowed) or 'none'})"
        )
    if not offering:
        raise UnknownReference(
            f"unknown image {spec.image!r}: no agent of scaling group {spec.scaling_group!r} offers it"
        )
    reason = never_fits(per_kernel, spec.cluster_size, spec.cluster_mode, offering)
    if reason is not None:
        raise Unsatisfiable(
            f"no agent of scaling group {spec.scaling_group!r} offering {spec.image!r} "
            f"could ever hold this session: {reason}"
        )


async def check_dependencies(
    conn: AsyncConnection, principal: Principal, depends_on: list[uuid.UUID]
) -> list[uuid.UUID]:
    wanted = list(dict.fromkeys(depends_on))
    if not wanted:
        return []
    found = set(
        (await conn.execute(select(Session.id).where(Session.id.in_(wanted), visible(principal)))).scalars()
    )
    missing = [str(d) for d in wanted if d not in found]
    if missing:
        raise UnknownReference(f"depends_on names sessions that do not exist: {', '.join(missing)}")
    return wanted
