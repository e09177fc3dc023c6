"""The sessions' indexes on columns most sessions leave empty hold only the sessions that set them
(migration 0012), against real PostgreSQL: every move of a session is a new row version that each
index it belongs to takes an entry for. The statements that look these columns up still reach
their rows by those indexes."""

from __future__ import annotations

import uuid

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.manager.repositories.session_inserts import _EXISTING
from sokovan.orchestrator.maintenance.retention import _REMOVE
from tests.orchestrator.bulk_seed import bulk_sessions
from tests.orchestrator.db_seed import Seed
from tests.orchestrator.test_write_plans_db import plan_of

S, K = SessionStatus, KernelStatus
SPARSE = ("uq_sessions_access_key_creation_id", "ix_sessions_parent_session_id", "ix_sessions_deployment_id")


async def test_sessions_that_leave_the_columns_empty_have_no_entry_and_lookups_still_use_the_indexes(
    engine: AsyncEngine,
) -> None:
    seed = await Seed(engine).tenancy()
    await bulk_sessions(
        engine, 3000, tag="t", access_key="AK1", user_id=seed.user_id, project_id=seed.project_id,
        status=S.PENDING, kernel_status=K.PENDING,
    )  # fmt: skip
    parent = await seed.session(status=S.TERMINATED, kernel_status=K.TERMINATED)
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE sessions SET creation_id = 'c1', parent_session_id = :p WHERE name = 't-1'"),
            {"p": parent},
        )
        # Every session moves once: a new row version for each.
        await conn.execute(text("UPDATE sessions SET status = 'SCHEDULED' WHERE status = 'PENDING'"))
        await conn.execute(text("ANALYZE sessions"))
        sizes = {
            name: size
            for name, size in await conn.execute(
                text("SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes"
                     " WHERE relname = 'sessions'")
            )
        }  # fmt: skip
    # A full index of 6,000 row versions spans dozens of pages; these hold one entry, or none.
    page = 8192
    assert all(sizes[name] <= 2 * page for name in SPARSE), sizes
    assert sizes["pk_sessions"] > 10 * page  # the same rows in a full index, for comparison
    plan = await plan_of(engine, _EXISTING, {"keys": ["AK1"], "ids": ["c1"]})
    assert "uq_sessions_access_key_creation_id" in plan, plan
    unlink = next(sql for kind, sql in _REMOVE if kind == "parent_link")
    plan = await plan_of(engine, text(unlink), {"ids": [parent, uuid.uuid4()]})
    assert "ix_sessions_parent_session_id" in plan, plan
