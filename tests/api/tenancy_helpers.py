"""Helpers for tests that set limits and place kernels directly in the database."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.db.models import AuditLog, Kernel, Keypair, SessionSchedulingHistory, User
from tests.api.conftest import Api


async def bind_policy(engine: AsyncEngine, user: str, policy: str | None) -> None:
    """Bind every keypair of `user` to the resource policy `policy`."""
    async with engine.begin() as conn:
        user_id = select(User.id).where(User.name == user).scalar_subquery()
        await conn.execute(update(Keypair).where(Keypair.user_id == user_id).values(resource_policy=policy))


async def put(api: Api, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    resp = await api.client.put(path, json=body, headers=api.admin if headers is None else headers)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def place_kernels(engine: AsyncEngine, session_id: str, agent_id: str, status: str = "RUNNING") -> None:
    """Put every kernel of a session on `agent_id` in `status`, as the scheduler would have."""
    async with engine.begin() as conn:
        await conn.execute(
            update(Kernel)
            .where(Kernel.session_id == uuid.UUID(session_id))
            .values(agent_id=agent_id, status=status)
        )


async def audit_actions(engine: AsyncEngine) -> list[tuple[str, str | None]]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(AuditLog.action, AuditLog.target).order_by(AuditLog.id))
        return [(r.action, r.target) for r in rows]


async def history_count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        found = await conn.scalar(select(func.count()).select_from(SessionSchedulingHistory))
        return int(found or 0)
