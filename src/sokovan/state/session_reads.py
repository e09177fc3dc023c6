"""The session read model handlers work on, and its batched reads: one statement per kind of row.

`SessionWithKernels` is what every session handler and the placement pipeline see; `fetch_sessions`
reads a batch of them, deciding a promotion's kernel condition (ALL / ANY / NOT_ANY) in SQL so that
an idle cycle reads nothing.
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Agent, Kernel, ScalingGroup, Session, SessionDependency
from sokovan.state.status_info import SessionStatusInfo, status_info_of

BATCH_LIMIT = 5000


@dataclass(frozen=True)
class KernelInfo:
    id: uuid.UUID
    status: KernelStatus
    agent_id: str | None
    agent_addr: str | None
    cluster_role: str
    cluster_idx: int
    occupied_slots: ResourceSlots
    exit_code: int | None
    status_info: dict[str, Any]


@dataclass(frozen=True)
class SessionWithKernels:
    id: uuid.UUID
    name: str
    access_key: str
    user_id: uuid.UUID
    project_id: uuid.UUID
    domain_name: str
    scaling_group: str
    pending_timeout: float
    type: str
    image: str
    command: str | None
    environ: dict[str, str]
    resources: ResourceSlots
    cluster_size: int
    cluster_mode: str
    priority: int
    status: SessionStatus
    status_info: SessionStatusInfo
    status_changed_at: dt.datetime
    phase_attempts: int
    created_at: dt.datetime
    kernels: tuple[KernelInfo, ...]
    depends_on: tuple[uuid.UUID, ...] = ()

    @property
    def requested_slots(self) -> ResourceSlots:
        return self.resources.scaled(self.cluster_size)


class KernelMatchType(enum.Enum):
    ALL = "all"
    ANY = "any"
    NOT_ANY = "not_any"


def kernels_match(
    kernels: Sequence[KernelInfo], statuses: frozenset[KernelStatus], match: KernelMatchType
) -> bool:
    hits = [k.status in statuses for k in kernels]
    if match is KernelMatchType.ALL:
        return all(hits)
    if match is KernelMatchType.ANY:
        return any(hits)
    return not any(hits)


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
        status_info=status_info_of(s.status_info),
        status_changed_at=s.status_changed_at,
        phase_attempts=s.phase_attempts,
        created_at=s.created_at,
        kernels=tuple(kernels),
        depends_on=depends_on,
    )
