"""The retry lane's reads use their partial indexes (`db.retry_rows`): the planner takes a partial
index only when the statement's condition implies the index's, so a reworded condition would fall
back silently to reading every session kept. With sequential scans disabled and the table's other
indexes dropped for the transaction (so the table's statistics, left by whichever test ran before,
cannot make another index look cheaper), each statement's plan must name its index."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import text
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.db.models import Session
from sokovan.orchestrator.retry import engine as retry


def sql(statement: object) -> str:
    compiled = statement.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})  # type: ignore[attr-defined]
    return str(compiled)


@pytest.mark.parametrize(
    ("index", "statement"),
    [
        ("ix_sessions_retry_undecided", lambda: sql(retry.undecided_query())),
        ("ix_sessions_retry_scheduled", lambda: sql(retry.due_query(dt.datetime(2030, 1, 1, tzinfo=dt.UTC)))),
        ("ix_sessions_retry_uncounted", lambda: str(retry._COUNT_SUCCESSES)),
    ],
)
async def test_each_read_uses_its_index(engine: AsyncEngine, index: str, statement: object) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("SET LOCAL enable_seqscan = off"))
        for other in Session.__table__.indexes:
            if other.name != index:
                await conn.execute(text(f'DROP INDEX "{other.name}"'))
        plan = "\n".join(row[0] for row in await conn.execute(text("EXPLAIN " + statement())))  # type: ignore[operator]
        await conn.rollback()
    assert index in plan, plan
