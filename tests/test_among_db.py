"""`among` against real PostgreSQL: the same rows as IN for any number of values (none included),
for uuid and text columns, with one statement text whatever the length."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.db.among import among
from sokovan.db.models import Agent, Kernel
from tests.orchestrator.db_seed import Seed


@pytest.mark.parametrize("count", [0, 1, 3, 250])
async def test_the_same_rows_as_in(engine: AsyncEngine, count: int) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    await seed.agent("a2")
    sessions = [await seed.session() for _ in range(4)]
    wanted = sessions[: min(count, 2)] + [uuid.uuid4() for _ in range(max(0, count - 2))]
    async with engine.connect() as conn:
        by_in = set((await conn.execute(select(Kernel.id).where(Kernel.session_id.in_(wanted)))).scalars())
        by_any = set(
            (await conn.execute(select(Kernel.id).where(among(Kernel.session_id, wanted)))).scalars()
        )
        agents = set((await conn.execute(select(Agent.id).where(among(Agent.id, ["a2", "nope"])))).scalars())
    assert by_any == by_in
    assert len(by_any) == min(count, 2)
    assert agents == {"a2"}


def test_one_statement_text_for_every_length() -> None:
    def sql(n: int) -> str:
        query = select(Kernel.id).where(among(Kernel.session_id, [uuid.uuid4() for _ in range(n)]))
        return str(query.compile(dialect=postgresql.dialect()))

    assert sql(1) == sql(500)
