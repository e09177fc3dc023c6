"""Fresh planner statistics against real PostgreSQL: the maintenance lane analyzes `sessions` and
`kernels` once enough of them changed since their last analyze, and leaves them alone otherwise."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from sokovan.common.types import KernelStatus
from sokovan.orchestrator.maintenance.statistics import AT_LEAST, FreshStatistics, stale
from tests.orchestrator.bulk_seed import bulk_sessions
from tests.orchestrator.db_seed import Seed


@pytest.mark.parametrize(
    ("changed", "rows", "want"),
    [
        (0, 0, False),
        (AT_LEAST - 1, 0, False),  # a small table: not for a few hundred rows
        (AT_LEAST, 0, True),
        (AT_LEAST, 100_000, False),  # a large one: a fifth of it must have changed
        (19_999, 100_000, False),
        (20_000, 100_000, True),
    ],
)
def test_stale_is_a_fraction_of_the_table_and_at_least_a_floor(changed: int, rows: int, want: bool) -> None:
    assert stale(changed, rows) is want


async def last_analyzed(engine: AsyncEngine, table: str) -> tuple[int, object]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT analyze_count + autoanalyze_count, n_mod_since_analyze FROM pg_stat_user_tables "
                    "WHERE schemaname = current_schema() AND relname = :t"
                ),
                {"t": table},
            )
        ).one()
    return int(row[0]), row[1]


async def write_burst(engine: AsyncEngine, seed: Seed, tag: str) -> None:
    """`AT_LEAST + 100` sessions with their kernels, written by one connection that flushes its
    statistics at once (PostgreSQL otherwise reports an idle backend's counts up to ten seconds
    later)."""
    writer = create_async_engine(engine.url, pool_size=1, max_overflow=0)
    try:
        await bulk_sessions(
            writer,
            AT_LEAST + 100,
            tag=tag,
            access_key="AK1",
            user_id=seed.user_id,
            project_id=seed.project_id,
            kernel_status=KernelStatus.PENDING,
        )
        async with writer.connect() as conn:
            await conn.execute(text("SELECT pg_stat_force_next_flush()"))
    finally:
        await writer.dispose()


async def test_a_burst_of_sessions_is_analyzed_and_a_quiet_table_is_not(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    keeper = FreshStatistics(engine)
    async with engine.begin() as conn:  # whatever earlier tests left: a clean start
        await conn.execute(text("ANALYZE sessions"))
        await conn.execute(text("ANALYZE kernels"))

    await write_burst(engine, seed, "burst")
    before = await last_analyzed(engine, "sessions")
    assert await keeper.run() == ["kernels", "sessions"]
    count, changed = await last_analyzed(engine, "sessions")
    assert (count, changed) == (before[0] + 1, 0)
    assert await keeper.run() == [], "analyzed once, not every cycle"


async def test_a_table_whose_lock_is_held_is_left_for_the_next_cycle(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    keeper = FreshStatistics(engine, tables=["sessions"])
    await write_burst(engine, seed, "held")
    async with engine.connect() as holder:  # what autovacuum holds while it analyzes
        await holder.execute(text("LOCK TABLE sessions IN SHARE UPDATE EXCLUSIVE MODE"))
        assert await keeper.run() == []
        await holder.rollback()
    assert await keeper.run() == ["sessions"]
