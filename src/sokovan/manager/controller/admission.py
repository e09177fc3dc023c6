"""Admission: everything a create request (or its dry run) must pass before anything is written.

Each check refuses with a `ControllerError` (4xx) a request that can never be satisfied (unknown
scaling group or image, more than any agent could hold, more than a defined quota allows) or, for
the pending limit, one that may not be queued right now. Waiting for room is not refused here: a
session that fits in principle waits in PENDING.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.db.models import Session
from sokovan.manager.controller.admission_cache import CapacityCache, GroupShapes
from sokovan.manager.controller.errors import (
    Forbidden,
    QuotaExceeded,
    TooManyPending,
    UnknownReference,
    Unsatisfiable,
)
from sokovan.manager.controller.feasibility import never_fits
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
    """Run every check, reading what it needs on `conn`; returns the de-duplicated dependencies.
    (A create reads the same from its caches and leaves the pending limit to its batch.)"""
    cache = capacity or CapacityCache(ttl=0)
    largest = await cache.largest_group(conn) if spec.cluster_size > 1 else 0
    shapes = await cache.lookup(conn, spec.scaling_group, spec.image)
    check_request(principal, spec, per_kernel, limits, shapes, largest)
    await check_pending_limit(conn, principal, limits)
    return await check_dependencies(conn, principal, spec.depends_on)


def check_request(
    principal: Principal,
    spec: SessionCreateRequest,
    per_kernel: ResourceSlots,
    limits: OwnerLimits,
    shapes: GroupShapes | None,
    largest_group: int,
) -> None:
    """The checks that need no database, given what was read (or cached): the caller's priority,
    the cluster size against the largest group, the group, type and image, whether any agent could
    ever hold it, and the quotas. Raises the first refusal."""
    refusal = priority_refusal(spec.priority, principal.is_admin)
    if refusal is not None:
        raise Forbidden(refusal, errors=[{"field": "priority", "message": refusal, "type": "admin_only"}])
    if spec.cluster_size > 1:
        refusal = cluster_size_refusal(spec.cluster_size, largest_group)
        if refusal is not None:
            raise Unsatisfiable(
                refusal, errors=[{"field": "cluster_size", "message": refusal, "type": "too_large"}]
            )
    check_shapes(spec, per_kernel, shapes)
    violations = quota_violations(limits, per_kernel.scaled(spec.cluster_size))
    if violations:
        raise QuotaExceeded("; ".join(violations))


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
        raise too_many_pending(principal.access_key, pending, cap, limits.policy_name)


def too_many_pending(access_key: str, pending: int, cap: int, policy_name: str | None) -> TooManyPending:
    return TooManyPending(
        f"{pending} session(s) of {access_key} are PENDING; keypair policy "
        f"{policy_name!r} allows {cap}: wait for some to start or cancel them"
    )


async def check_placeable(
    conn: AsyncConnection,
    spec: SessionCreateRequest,
    per_kernel: ResourceSlots,
    capacity: CapacityCache | None = None,
) -> None:
    check_shapes(
        spec,
        per_kernel,
        await (capacity or CapacityCache(ttl=0)).lookup(conn, spec.scaling_group, spec.image),
    )


def check_shapes(spec: SessionCreateRequest, per_kernel: ResourceSlots, shapes: GroupShapes | None) -> None:
    """The group exists and allows the type, some agent offers the image, and one could ever hold
    the session (`shapes`: what `CapacityCache.lookup` answered)."""
    if shapes is None:
        raise UnknownReference(f"scaling group {spec.scaling_group!r} does not exist")
    allowed, offering = shapes
    if spec.type.value not in allowed:
        raise Unsatisfiable(
            f"scaling group {spec.scaling_group!r} does not allow {spec.type.value} sessions "
            f"(allowed: {', '.join(allowed) or 'none'})"
        )
    if not offering:
        raise UnknownReference(
            f"unknown image {spec.image!r}: no agent of scaling group {spec.scaling_group!r} holds it "
            "or may pull it from its registry"
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
