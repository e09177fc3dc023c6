"""A handler's read takes no transaction: each of its statements is a transaction of its own (no
BEGIN and ROLLBACK round trips around it), while its writes still commit together."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tests.orchestrator.test_lane_skipping_db import Lanes, Step, Table

_XACT = text("SELECT pg_current_xact_id()::text")


async def alone(conn: AsyncConnection) -> bool:
    """Whether two statements in a row on `conn` ran in transactions of their own."""
    return await conn.scalar(_XACT) != await conn.scalar(_XACT)


class Watched(Table):
    """Records, for each read and each write, whether its statement was a transaction of its own."""

    def __init__(self, statuses: dict[str, str]) -> None:
        super().__init__(statuses)
        self.reads_alone: list[bool] = []
        self.writes_alone: list[bool] = []

    async def load(self, conn: AsyncConnection, handler: Step, now: dt.datetime) -> list[str]:
        self.reads_alone.append(await alone(conn))
        return await super().load(conn, handler, now)

    async def write(self, conn: AsyncConnection, changes: Sequence[tuple[str, str]]) -> object:
        self.writes_alone.append(await alone(conn))
        return await super().write(conn, changes)


async def test_reads_run_without_a_transaction_and_writes_within_one(engine: AsyncEngine) -> None:
    table = Watched({"1": "A"})
    lanes = Lanes("things", table, engine, {"lane": [Step("a_to_b", "A", "B")]})
    assert await lanes.cycle_lane("lane")
    assert table.statuses == {"1": "B"}
    assert table.reads_alone == [True]
    assert table.writes_alone == [False]
    # The pool's connections are back to their transactional default.
    async with engine.connect() as conn:
        assert not await alone(conn)


async def test_a_write_of_one_statement_runs_without_a_transaction(engine: AsyncEngine) -> None:
    table = Watched({"1": "A"})
    table.at_once = True
    lanes = Lanes("things", table, engine, {"lane": [Step("a_to_b", "A", "B")]})
    assert await lanes.cycle_lane("lane")
    assert table.statuses == {"1": "B"}
    assert table.writes_alone == [True]
