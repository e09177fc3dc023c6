"""The one-statement writes reach their rows by index on a table of thousands of sessions, against
real PostgreSQL. They take their rows from a JSON batch, for which PostgreSQL guesses a hundred
rows: joined on that alone, past a few thousand sessions it read whole tables at every write. Nor
may a batch of thousands be tested row by row against the whole array of its ids (`= ANY` as a
filter: a minute for 5,000)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from sqlalchemy import TextClause, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import KernelStatus, SchedulingResult, SessionStatus
from sokovan.db.models import Kernel, Session
from sokovan.state.kernel_writes import _APPLY
from sokovan.state.session_moves import _MOVE, _row
from sokovan.state.session_writes import SessionTransition
from tests.orchestrator.bulk_seed import bulk_sessions
from tests.orchestrator.db_seed import Seed

S, K = SessionStatus, KernelStatus


async def plan_of(engine: AsyncEngine, statement: TextClause, params: dict[str, Any]) -> str:
    """The executed plan of `statement` (its writes rolled back)."""
    async with engine.connect() as conn:
        explain = text("EXPLAIN (ANALYZE, COSTS OFF) " + statement.text)
        rows = await conn.execute(explain, params)
        plan = "\n".join(r[0] for r in rows)
        await conn.rollback()
    return plan


async def test_a_hand_off_and_a_kernel_event_probe_their_rows_among_thousands(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=64)
    await bulk_sessions(
        engine, 5000, tag="t", access_key="AK1", user_id=seed.user_id, project_id=seed.project_id,
        status=S.TERMINATED, kernel_status=K.TERMINATED, ended_age=60,
    )  # fmt: skip
    sid = await seed.session(status=S.SCHEDULED, kernel_status=K.SCHEDULED, agent_id="a1")
    async with engine.begin() as conn:
        await conn.execute(text("ANALYZE"))
        kid = (await conn.execute(select(Kernel.id).where(Kernel.session_id == sid))).scalar_one()
    now = dt.datetime.now(dt.UTC)
    hand_off = SessionTransition(
        sid, frozenset({S.SCHEDULED}), S.PREPARING, "T", SchedulingResult.SUCCESS, kernel_to=K.PREPARING
    )
    plan = await plan_of(
        engine,
        _MOVE,
        {
            "batch": json.dumps([_row(hand_off)]),
            "ids": [sid],
            "now": now,
            "terminal": ["TERMINATED"],
            "success": "SUCCESS",
        },
    )
    print(plan)  # for the record (pytest -s)
    assert "Seq Scan on sessions" not in plan and "Seq Scan on kernels" not in plan
    event = {
        "id": str(kid), "expected": ["SCHEDULED"], "to_status": "PREPARING", "agent": "a1", "exit_code": None,
        "info": {}, "terminal": False, "addr": None, "source": "agent:x", "message": None,
    }  # fmt: skip
    plan = await plan_of(engine, _APPLY, {"batch": json.dumps([event]), "ids": [kid], "now": now})
    print(plan)
    assert "Seq Scan on sessions" not in plan and "Seq Scan on kernels" not in plan


def array_filters(plan: str) -> list[str]:
    """Plan lines that test each row against the whole array of the batch's ids."""
    return [
        line
        for line in plan.splitlines()
        if "Filter: (id = ANY" in line or "Filter: (session_id = ANY" in line
    ]


async def test_a_batch_of_thousands_is_never_tested_row_by_row_against_its_ids(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=64)
    for status in (S.TERMINATED, S.SCHEDULED):
        await bulk_sessions(
            engine, 2000, tag=status.value, access_key="AK1", user_id=seed.user_id,
            project_id=seed.project_id, status=status,
        )  # fmt: skip
    async with engine.begin() as conn:
        await conn.execute(text("ANALYZE"))
        ids = list((await conn.execute(select(Session.id).where(Session.status == "SCHEDULED"))).scalars())
        kids = list((await conn.execute(select(Kernel.id).where(Kernel.session_id.in_(ids)))).scalars())
    now = dt.datetime.now(dt.UTC)
    batch = [
        _row(SessionTransition(sid, frozenset({S.SCHEDULED}), S.PREPARING, "T", SchedulingResult.SUCCESS,
                               kernel_to=K.PREPARING))
        for sid in ids
    ]  # fmt: skip
    plan = await plan_of(
        engine,
        _MOVE,
        {"batch": json.dumps(batch), "ids": ids, "now": now, "terminal": ["ERROR"], "success": "SUCCESS"},
    )
    assert len(ids) == 2000 and "rows=2000" in plan and array_filters(plan) == []
    events = [
        {"id": str(k), "expected": ["SCHEDULED"], "to_status": "PREPARING", "agent": None, "exit_code": None,
         "info": {}, "terminal": False, "addr": None, "source": "agent:x", "message": None}
        for k in kids
    ]  # fmt: skip
    plan = await plan_of(engine, _APPLY, {"batch": json.dumps(events), "ids": kids, "now": now})
    assert "rows=2000" in plan and array_filters(plan) == []
