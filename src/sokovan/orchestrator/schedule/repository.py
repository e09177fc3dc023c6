"""Batched reads for the ScheduleCoordinator: one statement per kind of row per cycle."""

from __future__ import annotations

import datetime as dt
import uuid
from collections import defaultdict
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import Numeric, cast, exists, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Agent, Kernel, ScalingGroup, Session, SessionDependency
from sokovan.orchestrator.handler_types import KernelInfo, KernelMatchType, SessionWithKernels

BATCH_LIMIT = 5000


async def fetch_sessions(
    conn: AsyncConnection,
    statuses: frozenset[SessionStatus],
    kernel_statuses: frozenset[KernelStatus] | None = None,
    limit: int = BATCH_LIMIT,
    *,
    match: KernelMatchType | None = None,
    changed_before: dt.datetime | None = None,
) -> list[SessionWithKernels]:
    """Sessions in `statuses`, oldest first.

    `kernel_statuses` alone keeps sessions having a kernel in those statuses. With `match`, the
    ALL / ANY / NOT_ANY condition of a promotion is evaluated in SQL, so only sessions that meet
    it are read. `changed_before` keeps sessions that entered their status before that time.
    """
    query = (
        select(*Session.__table__.c, ScalingGroup.pending_timeout)
        .join(ScalingGroup, ScalingGroup.name == Session.scaling_group)
        .where(Session.status.in_([s.value for s in statuses]))
        .order_by(Session.created_at, Session.id)
        .limit(limit)
    )
    if kernel_statuses is not None:
        listed = [k.value for k in kernel_statuses]
        has = exists().where(Kernel.session_id == Session.id, Kernel.status.in_(listed))
        has_other = exists().where(Kernel.session_id == Session.id, Kernel.status.not_in(listed))
        if match is None or match is KernelMatchType.ANY:
            query = query.where(has)
        elif match is KernelMatchType.NOT_ANY:
            query = query.where(~has)
        else:
            query = query.where(~has_other)
    if changed_before is not None:
        query = query.where(Session.status_changed_at < changed_before)
    rows = (await conn.execute(query)).all()
    if not rows:
        return []
    ids = [r.id for r in rows]
    kernels = await _fetch_kernels(conn, ids)
    deps: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
    if SessionStatus.PENDING in statuses:
        dep_rows = await conn.execute(
            select(SessionDependency.session_id, SessionDependency.depends_on).where(
                SessionDependency.session_id.in_(ids)
            )
        )
        for sid, dep in dep_rows:
            deps[sid].append(dep)
    return [_session(r, kernels.get(r.id, []), tuple(deps.get(r.id, ()))) for r in rows]


async def _fetch_kernels(
    conn: AsyncConnection, session_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[KernelInfo]]:
    rows = await conn.execute(
        select(*Kernel.__table__.c, Agent.rpc_addr)
        .outerjoin(Agent, Agent.id == Kernel.agent_id)
        .where(Kernel.session_id.in_(session_ids))
        .order_by(Kernel.session_id, Kernel.cluster_idx)
    )
    out: dict[uuid.UUID, list[KernelInfo]] = defaultdict(list)
    for k in rows:
        out[k.session_id].append(
            KernelInfo(
                id=k.id,
                status=KernelStatus(k.status),
                agent_id=k.agent_id,
                agent_addr=k.rpc_addr,
                cluster_role=k.cluster_role,
                cluster_idx=k.cluster_idx,
                occupied_slots=ResourceSlots.from_json(k.occupied_slots),
                exit_code=k.exit_code,
                status_info=dict(k.status_info or {}),
            )
        )
    return out


def _session(s: Any, kernels: list[KernelInfo], depends_on: tuple[uuid.UUID, ...]) -> SessionWithKernels:
    """A session row (Core, with its group's pending_timeout) and its kernels, as the handlers see it."""
    return SessionWithKernels(
        id=s.id,
        name=s.name,
        access_key=s.access_key,
        user_id=s.user_id,
        project_id=s.project_id,
        domain_name=s.domain_name,
        scaling_group=s.scaling_group,
        pending_timeout=s.pending_timeout,
        type=s.type,
        image=s.image,
        command=s.command,
        environ={str(k): str(v) for k, v in (s.environ or {}).items()},
        resources=ResourceSlots.from_json(s.resources),
        cluster_size=s.cluster_size,
        cluster_mode=s.cluster_mode,
        priority=s.priority,
        status=SessionStatus(s.status),
        status_info=dict(s.status_info or {}),
        status_changed_at=s.status_changed_at,
        phase_attempts=s.phase_attempts,
        created_at=s.created_at,
        kernels=tuple(kernels),
        depends_on=depends_on,
    )


def holds_slots() -> list[str]:
    """A kernel holds slots on its agent from placement until it reaches a terminal status."""
    return [s.value for s in KernelStatus.non_terminal()]


async def agent_occupancy(
    conn: AsyncConnection, agent_ids: Sequence[str] | None = None
) -> tuple[dict[str, ResourceSlots], dict[str, int]]:
    """Derived occupancy: slots and kernel counts held by non-terminal placed kernels, per agent."""
    slot = func.jsonb_each_text(Kernel.occupied_slots).table_valued("key", "value").alias("slot")
    where = [Kernel.agent_id.is_not(None), Kernel.status.in_(holds_slots())]
    if agent_ids is not None:
        where.append(Kernel.agent_id.in_(agent_ids))
    slot_rows = await conn.execute(
        select(Kernel.agent_id, slot.c.key, func.sum(cast(slot.c.value, Numeric)))
        .select_from(Kernel)
        .join(slot, literal_column("true"))
        .where(*where)
        .group_by(Kernel.agent_id, slot.c.key)
    )
    occupied: dict[str, ResourceSlots] = defaultdict(ResourceSlots)
    for agent_id, key, total in slot_rows:
        occupied[agent_id][key] = Decimal(total)
    count_rows = await conn.execute(
        select(Kernel.agent_id, func.count()).where(*where).group_by(Kernel.agent_id)
    )
    counts = {str(agent_id): int(n) for agent_id, n in count_rows}
    return dict(occupied), counts
