"""Thousands of sessions inserted in one statement each (generate_series), for the fairness and
retention tests; the tenancy comes from `db_seed.Seed`."""

from __future__ import annotations

import uuid

from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Keypair, User
from tests.orchestrator.db_seed import Seed

_SESSIONS = text(
    """
    INSERT INTO sessions (id, name, access_key, user_id, project_id, domain_name, scaling_group, type,
                          image, command, resources, cluster_size, priority, status, status_info,
                          status_changed_at, created_at, terminated_at, parent_session_id)
    SELECT gen_random_uuid(), CAST(:tag AS text) || '-' || i, :ak, :user_id, :project_id, 'default',
           :sg, 'batch', 'python:3', 'true', CAST(:resources AS jsonb), 1, :priority, :status,
           CAST(:info AS jsonb),
           now() - make_interval(secs => CAST(:age AS float8)),
           now() - make_interval(secs => CAST(:age AS float8) - i * 0.001),
           CASE WHEN CAST(:ended_age AS float8) IS NULL THEN NULL
                ELSE now() - make_interval(secs => CAST(:ended_age AS float8)) END,
           CAST(:parent AS uuid)
    FROM generate_series(1, :n) AS i
    """
)
_KERNELS = text(
    """
    INSERT INTO kernels (id, session_id, status, occupied_slots, terminated_at)
    SELECT gen_random_uuid(), s.id, :kstatus, s.resources, s.terminated_at FROM sessions s
    WHERE s.name LIKE CAST(:tag AS text) || '-%'
    """
)
_HISTORY = text(
    """
    INSERT INTO session_scheduling_history (session_id, handler, result, from_status, to_status)
    SELECT s.id, 'Seed', 'SUCCESS', NULL, s.status FROM sessions s
    WHERE s.name LIKE CAST(:tag AS text) || '-%'
    """
)
_KERNEL_HISTORY = text(
    """
    INSERT INTO kernel_scheduling_history (kernel_id, session_id, source, to_status)
    SELECT k.id, k.session_id, 'seed', k.status FROM kernels k JOIN sessions s ON s.id = k.session_id
    WHERE s.name LIKE CAST(:tag AS text) || '-%'
    """
)
_DEPENDS = text(
    """
    INSERT INTO session_dependencies (session_id, depends_on)
    SELECT s.id, CAST(:dep AS uuid) FROM sessions s WHERE s.name LIKE CAST(:tag AS text) || '-%'
    """
)


async def add_owner(engine: AsyncEngine, seed: Seed, access_key: str, name: str) -> uuid.UUID:
    """Another user with a keypair in the seed's project; returns the user's id."""
    user_id = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(insert(User).values(id=user_id, name=name, domain_name="default"))
        await conn.execute(
            insert(Keypair).values(
                access_key=access_key,
                token_hash=f"h-{access_key}",
                user_id=user_id,
                project_id=seed.project_id,
                role="user",
            )
        )
    return user_id


async def bulk_sessions(
    engine: AsyncEngine,
    n: int,
    *,
    tag: str,
    access_key: str,
    user_id: uuid.UUID,
    project_id: uuid.UUID,
    cpu: int = 1,
    status: SessionStatus = SessionStatus.PENDING,
    kernel_status: KernelStatus | None = None,
    priority: int = 10,
    age: float = 3600.0,
    ended_age: float | None = None,
    depends_on: uuid.UUID | None = None,
    parent: uuid.UUID | None = None,
    info: str = "{}",
    scaling_group: str = "default",
    history: bool = False,
) -> None:
    """`n` one-kernel sessions named `<tag>-<i>`, created `age` seconds ago (in creation order by i),
    ended `ended_age` seconds ago (None: not ended)."""
    async with engine.begin() as conn:
        await conn.execute(
            _SESSIONS,
            {
                "tag": tag,
                "ak": access_key,
                "user_id": user_id,
                "project_id": project_id,
                "sg": scaling_group,
                "resources": f'{{"cpu": "{cpu}", "mem": "{2**30}"}}',
                "priority": priority,
                "status": status.value,
                "info": info,
                "age": age,
                "ended_age": ended_age,
                "parent": str(parent) if parent else None,
                "n": n,
            },
        )
        await conn.execute(
            _KERNELS, {"tag": tag, "kstatus": (kernel_status or KernelStatus(status.value)).value}
        )
        if depends_on is not None:
            await conn.execute(_DEPENDS, {"tag": tag, "dep": depends_on})
        if history:
            await conn.execute(_HISTORY, {"tag": tag})
            await conn.execute(_KERNEL_HISTORY, {"tag": tag})
