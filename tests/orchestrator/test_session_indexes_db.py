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
from sokovan.orchestrator.provisioner.loader import _NOMINATED
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


async def test_placement_finds_the_nominated_among_thousands_waiting_through_their_own_index(
    engine: AsyncEngine,
) -> None:
    """The placement cycle's read of the nominated sessions (`loader._NOMINATED`) reaches them by
    the partial index that holds only them, also in a prepared statement's generic plan, and
    returns exactly them."""
    seed = await Seed(engine).tenancy()
    await bulk_sessions(
        engine, 3000, tag="w", access_key="AK1", user_id=seed.user_id, project_id=seed.project_id,
        status=S.PENDING, kernel_status=K.PENDING, info='{"reason": "no agent has room"}',
    )  # fmt: skip
    await bulk_sessions(
        engine, 1, tag="n", access_key="AK1", user_id=seed.user_id, project_id=seed.project_id,
        status=S.PENDING, kernel_status=K.PENDING, info='{"nominated_agents": ["a1"]}',
    )  # fmt: skip
    await bulk_sessions(  # a nomination left on a session that has moved on is not the index's
        engine, 1, tag="m", access_key="AK1", user_id=seed.user_id, project_id=seed.project_id,
        status=S.CANCELLED, kernel_status=K.CANCELLED, info='{"nominated_agents": ["a1"]}',
    )  # fmt: skip
    async with engine.begin() as conn:
        await conn.execute(text("ANALYZE sessions"))
        size = await conn.scalar(text("SELECT pg_relation_size('ix_sessions_nominated')"))
    assert size <= 2 * 8192, size  # one entry, not 3,000
    plan = await plan_of(engine, _NOMINATED, {"names": ["default"]})
    assert "ix_sessions_nominated" in plan, plan
    async with engine.connect() as conn:  # the plan a prepared statement settles on, for any names
        await conn.execute(text("SET plan_cache_mode = force_generic_plan"))
        prepared = _NOMINATED.text.replace(":names", "$1")
        await conn.exec_driver_sql(f"PREPARE nominated(text[]) AS {prepared}")
        generic = "\n".join(
            r[0] for r in await conn.exec_driver_sql("EXPLAIN (COSTS OFF) EXECUTE nominated('{default}')")
        )
        await conn.rollback()
        names = [r.id for r in await conn.execute(_NOMINATED, {"names": ["default"]})]
    assert "ix_sessions_nominated" in generic, generic
    async with engine.connect() as conn:
        nominee = await conn.scalar(text("SELECT id FROM sessions WHERE name = 'n-1'"))
    assert names == [nominee]
