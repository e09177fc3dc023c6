"""What Backend.AI's GraphQL asks beyond the REST reads (`sessions_read`): each session's user,
project and domain and its kernels' slots and times, and one keypair with its user and policy.

`session_extras` reads sessions the caller has already read through `sessions_read` (which
filters by what the caller may see), so it does not filter again."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.types import Role, SessionStatus
from sokovan.db.models import Kernel, Keypair, Project, Session, User


@dataclass(frozen=True)
class KernelExtras:
    cluster_idx: int
    status_info: dict[str, Any]
    status_changed_at: dt.datetime
    created_at: dt.datetime
    terminated_at: dt.datetime | None
    occupied_slots: dict[str, Any]


@dataclass(frozen=True)
class SessionExtras:
    user_id: uuid.UUID
    project_id: uuid.UUID
    project_name: str
    domain_name: str
    kernels: dict[uuid.UUID, KernelExtras] = field(default_factory=dict)


async def session_extras(conn: AsyncConnection, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, SessionExtras]:
    """For each session of `ids`: its owner's id, its project and domain and its kernels (two statements)."""
    if not ids:
        return {}
    rows = await conn.execute(
        select(Session.id, Session.user_id, Session.project_id, Session.domain_name, Project.name)
        .join(Project, Project.id == Session.project_id)
        .where(Session.id.in_(ids))
    )
    out = {r.id: SessionExtras(r.user_id, r.project_id, r.name, r.domain_name) for r in rows}
    kernels = await conn.execute(
        select(
            Kernel.session_id,
            Kernel.id,
            Kernel.cluster_idx,
            Kernel.status_info,
            Kernel.status_changed_at,
            Kernel.created_at,
            Kernel.terminated_at,
            Kernel.occupied_slots,
        ).where(Kernel.session_id.in_(ids))
    )
    for k in kernels:
        if k.session_id in out:
            out[k.session_id].kernels[k.id] = KernelExtras(
                k.cluster_idx,
                k.status_info or {},
                k.status_changed_at,
                k.created_at,
                k.terminated_at,
                k.occupied_slots or {},
            )
    return out


@dataclass(frozen=True)
class KeypairInfo:
    access_key: str
    user_id: uuid.UUID
    user_name: str
    project_name: str
    domain_name: str
    role: Role
    is_active: bool
    resource_policy: str | None
    created_at: dt.datetime
    concurrency_used: int  # its sessions that have not ended


_LIVE = select(func.count()).where(
    Session.access_key == Keypair.access_key,
    Session.status.in_([s.value for s in SessionStatus.non_terminal()]),
)


async def keypair_info(conn: AsyncConnection, access_key: str) -> KeypairInfo | None:
    """The keypair `access_key` (active or not), or None."""
    row = (
        await conn.execute(
            select(
                Keypair.access_key,
                Keypair.user_id,
                User.name.label("user_name"),
                Project.name.label("project_name"),
                Project.domain_name,
                Keypair.role,
                Keypair.is_active,
                Keypair.resource_policy,
                Keypair.created_at,
                _LIVE.correlate(Keypair).scalar_subquery().label("live"),
            )
            .join(User, User.id == Keypair.user_id)
            .join(Project, Project.id == Keypair.project_id)
            .where(Keypair.access_key == access_key)
        )
    ).first()
    if row is None:
        return None
    return KeypairInfo(
        access_key=row.access_key,
        user_id=row.user_id,
        user_name=row.user_name,
        project_name=row.project_name,
        domain_name=row.domain_name,
        role=Role(row.role),
        is_active=row.is_active,
        resource_policy=row.resource_policy,
        created_at=row.created_at,
        concurrency_used=int(row.live),
    )
