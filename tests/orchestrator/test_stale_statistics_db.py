"""The lanes' reads stay linear when the table's statistics are older than a burst.

PostgreSQL's statistics lag behind a burst: analyzed while every kernel was RUNNING, they say no
kernel is SCHEDULED when 2,000 are. A kernel condition written as EXISTS became a semi join that,
trusting that estimate, re-read every SCHEDULED kernel for every session (12.5 million rows for
5,000 sessions, 2-3.6 s per read of the call lanes in a 10,000-session burst). The condition is
now an aggregate over each session's own kernels, reached by the session index whatever the
estimates say."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.state.session_queries import KernelMatchType, PlacementWindow, sessions_query
from sokovan.state.session_reads import fetch_sessions
from tests.orchestrator.bulk_seed import bulk_sessions
from tests.orchestrator.db_seed import Seed
from tests.orchestrator.test_fair_window_db import Explain

S, K = SessionStatus, KernelStatus
N = 2000
_STALE = "SELECT id FROM sessions WHERE name LIKE 'stale-%'"


async def _stale(engine: AsyncEngine, seed: Seed, status: SessionStatus) -> None:
    """N sessions analyzed as RUNNING, then moved to `status` (kernels too) without an ANALYZE."""
    await bulk_sessions(
        engine, N, tag="stale", access_key="AK1", user_id=seed.user_id, project_id=seed.project_id,
        status=S.RUNNING,
    )  # fmt: skip
    async with engine.begin() as conn:
        await conn.execute(text("ANALYZE sessions"))
        await conn.execute(text("ANALYZE kernels"))
        moved = {"s": status.value}
        await conn.execute(text("UPDATE sessions SET status = :s WHERE name LIKE 'stale-%'"), moved)
        await conn.execute(text(f"UPDATE kernels SET status = :s WHERE session_id IN ({_STALE})"), moved)


async def _plan(engine: AsyncEngine, query: object) -> str:
    async with engine.connect() as conn:
        return "\n".join(r[0] for r in await conn.execute(Explain(query, analyze=True)))  # type: ignore[arg-type]


def _linear(plan: str) -> None:
    """Kernels are read only through each session's own (never a scan of a status's kernels)."""
    assert "ix_kernels_status" not in plan, plan
    assert "Seq Scan on kernels" not in plan, plan
    assert "Rows Removed by Join Filter" not in plan, plan


async def test_the_call_lanes_read_stays_linear_on_stale_statistics(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await _stale(engine, seed, S.SCHEDULED)
    _linear(await _plan(engine, sessions_query(frozenset({S.SCHEDULED}), frozenset({K.SCHEDULED}))))
    async with engine.connect() as conn:
        read = await fetch_sessions(conn, frozenset({S.SCHEDULED}), frozenset({K.SCHEDULED}))
    assert len(read) == N and all(k.status is K.SCHEDULED for s in read for k in s.kernels)


async def test_the_placement_window_stays_linear_on_stale_statistics(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await _stale(engine, seed, S.PENDING)
    query = sessions_query(
        frozenset({S.PENDING}), frozenset({K.PENDING}), window=PlacementWindow(), now=dt.datetime.now(dt.UTC)
    )
    _linear(await _plan(engine, query))


async def test_the_kernel_conditions_keep_their_meaning(engine: AsyncEngine) -> None:
    """ANY, ALL and NOT_ANY as before, a session without kernels included (ALL and NOT_ANY hold
    for it, ANY does not)."""
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    mixed = await seed.session(status=S.CREATING, kernel_status=K.RUNNING, agent_id="a1", size=2)
    async with engine.begin() as conn:
        one = "SELECT id FROM kernels WHERE session_id = :s LIMIT 1"
        await conn.execute(text(f"UPDATE kernels SET status = 'CREATING' WHERE id = ({one})"), {"s": mixed})
    running = await seed.session(status=S.CREATING, kernel_status=K.RUNNING, agent_id="a1")
    bare = await seed.session(status=S.CREATING, kernel_status=K.RUNNING, agent_id="a1")
    async with engine.begin() as conn:
        await conn.execute(text("DELETE FROM kernels WHERE session_id = :s"), {"s": bare})
    live = frozenset({K.RUNNING})

    async def ids(match: KernelMatchType) -> set[object]:
        async with engine.connect() as conn:
            return {s.id for s in await fetch_sessions(conn, frozenset({S.CREATING}), live, match=match)}

    assert await ids(KernelMatchType.ANY) == {mixed, running}
    assert await ids(KernelMatchType.ALL) == {running, bare}
    assert await ids(KernelMatchType.NOT_ANY) == {bare}
