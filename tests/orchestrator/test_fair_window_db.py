"""The fair placement window against real PostgreSQL: one owner's queue, however long, never hides
another's; sessions blocked on a dependency stay out of the read (told why once, and expired on
time); a dependency that failed still cancels; the read is indexed at 10k rows."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from sqlalchemy import func, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement, Executable

from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Session
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from sokovan.orchestrator.schedule.handlers.lifecycle.schedule_new_sessions import ScheduleNewSessions
from sokovan.state.session_queries import PlacementWindow, sessions_query
from sokovan.state.session_reads import fetch_sessions
from tests.orchestrator.bulk_seed import add_owner, bulk_sessions
from tests.orchestrator.db_seed import Seed, read_column
from tests.support import statements_sent

PENDING = frozenset({SessionStatus.PENDING})
PENDING_KERNELS = frozenset({KernelStatus.PENDING})


def coordinator(engine: AsyncEngine, config: ClusterConfig | None = None) -> ScheduleCoordinator:
    return ScheduleCoordinator(engine, config or ClusterConfig(), [ScheduleNewSessions(engine)])


async def window(engine: AsyncEngine, limit: int = 5000, per_owner: int = 5000) -> list[tuple[str, str]]:
    """(access key, name) of the sessions in the placement window, in the order they are read."""
    async with engine.connect() as conn:
        rows = await fetch_sessions(conn, PENDING, PENDING_KERNELS, window=PlacementWindow(limit, per_owner))
    names = await read_column(engine, select(Session.name).where(Session.id.in_([r.id for r in rows])))
    by_id = {r.id: r for r in rows}
    assert len(names) == len(rows)
    return [(by_id[r.id].access_key, r.name) for r in rows]


async def status_of(engine: AsyncEngine, name: str) -> str:
    return str((await read_column(engine, select(Session.status).where(Session.name == name)))[0])


async def count(engine: AsyncEngine, *where: object) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(Session).where(*where)) or 0)  # type: ignore[arg-type]


async def two_owners(engine: AsyncEngine, cpu: int = 4) -> tuple[Seed, uuid.UUID]:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=cpu)
    bob = await add_owner(engine, seed, "AK2", "bob")
    return seed, bob


async def test_six_thousand_sessions_waiting_on_a_dependency_do_not_hide_another_owners(
    engine: AsyncEngine,
) -> None:
    seed, bob = await two_owners(engine)
    dep = await seed.session(status=SessionStatus.RUNNING, agent_id="a1")
    await bulk_sessions(
        engine, 6000, tag="a", access_key="AK1", user_id=seed.user_id, project_id=seed.project_id,
        depends_on=dep, age=3600,
    )  # fmt: skip
    await bulk_sessions(engine, 1, tag="b", access_key="AK2", user_id=bob, project_id=seed.project_id, age=1)
    # The old read (the oldest 5,000 of the cluster) would hold none but A's.
    async with engine.connect() as conn:
        oldest = await fetch_sessions(conn, PENDING, PENDING_KERNELS)
    assert {s.access_key for s in oldest} == {"AK1"}

    await coordinator(engine).cycle()
    assert await status_of(engine, "b-1") == SessionStatus.SCHEDULED
    # A's blocked sessions were told why they wait, a window's worth per cycle (B took one place)...
    told = Session.status_info["pending_reason"].astext.like("waiting for dependencies%")
    assert await count(engine, Session.access_key == "AK1", told) == 4999
    # ...and once told, they are no longer read at all.
    for _ in range(12):
        await coordinator(engine).cycle()
    assert await count(engine, Session.access_key == "AK1", told) == 6000
    assert await window(engine) == []


async def test_six_thousand_sessions_too_big_to_place_do_not_hide_another_owners(
    engine: AsyncEngine,
) -> None:
    seed, bob = await two_owners(engine)
    await bulk_sessions(
        engine, 6000, tag="a", access_key="AK1", user_id=seed.user_id, project_id=seed.project_id,
        cpu=64, age=3600,
    )  # fmt: skip
    await bulk_sessions(engine, 1, tag="b", access_key="AK2", user_id=bob, project_id=seed.project_id, age=1)
    await coordinator(engine).cycle()
    assert await status_of(engine, "b-1") == SessionStatus.SCHEDULED
    assert await count(engine, Session.access_key == "AK1", Session.status == "PENDING") == 6000
    reason = Session.status_info["pending_reason"].astext.like("0/1 agents fit%")
    assert await count(engine, Session.access_key == "AK1", reason) == 4999


async def test_a_failed_dependency_still_cancels_its_waiting_sessions(engine: AsyncEngine) -> None:
    seed, _ = await two_owners(engine)
    dep = await seed.session(status=SessionStatus.RUNNING, agent_id="a1")
    await bulk_sessions(
        engine, 30, tag="a", access_key="AK1", user_id=seed.user_id, project_id=seed.project_id,
        depends_on=dep,
    )  # fmt: skip
    config = ClusterConfig()
    config.apply("manager/placement_window", json.dumps({"limit": 100, "per_owner": 10}).encode())
    for _ in range(3):
        await coordinator(engine, config).cycle()
    assert await window(engine) == []  # all 30 told, none read any more
    async with engine.begin() as conn:
        await conn.execute(update(Session).where(Session.id == dep).values(status="ERROR", result="FAILURE"))
    for _ in range(3):  # ten a cycle: the share bounds cancellations too
        await coordinator(engine, config).cycle()
    cancelled = await read_column(
        engine,
        select(Session.status_info["cause"].astext).where(
            Session.access_key == "AK1", Session.status == "CANCELLED"
        ),
    )
    assert cancelled == ["DEPENDENCY_FAILED"] * 30


async def told_to_wait(engine: AsyncEngine, each: int = 2, **ages: int) -> None:
    """In a group whose pending timeout is 60 s, `each` sessions per `tag=age` (seconds) blocked on
    a RUNNING dependency and already told why they wait."""
    seed = await Seed(engine).tenancy(pending_timeout=60)
    await seed.agent("a1")
    dep = await seed.session(status=SessionStatus.RUNNING, agent_id="a1")
    told = json.dumps({"pending_reason": f"waiting for dependencies: {dep} (RUNNING)"})
    for tag, age in ages.items():
        await bulk_sessions(
            engine, each, tag=tag, access_key="AK1", user_id=seed.user_id, project_id=seed.project_id,
            depends_on=dep, age=age, info=told,
        )  # fmt: skip


async def test_a_blocked_session_past_its_pending_timeout_is_still_cancelled(engine: AsyncEngine) -> None:
    await told_to_wait(engine, young=10, old=120)
    assert sorted(name for _, name in await window(engine)) == ["old-1", "old-2"]
    await coordinator(engine).cycle()
    assert [await status_of(engine, n) for n in ("old-1", "old-2", "young-1", "young-2")] == [
        "CANCELLED",
        "CANCELLED",
        "PENDING",
        "PENDING",
    ]


async def test_the_window_read_is_built_once_and_judges_expiry_at_each_reads_own_time(
    engine: AsyncEngine,
) -> None:
    """The window's statement is kept between cycles; the time a blocked session's pending timeout
    is measured against is each read's own, not the first read's."""
    await told_to_wait(engine, each=1, blocked=10)
    now = dt.datetime.now(dt.UTC)

    async def read_at(when: dt.datetime) -> list[str]:
        async with engine.connect() as conn:
            with statements_sent(engine) as sent:
                rows = await fetch_sessions(
                    conn, PENDING, PENDING_KERNELS, window=PlacementWindow(), now=when
                )
        statements.append(sent[0])
        return [r.access_key for r in rows]

    statements: list[str] = []
    assert await read_at(now) == []  # blocked and told: not read until it expires
    assert await read_at(now + dt.timedelta(seconds=120)) == ["AK1"]  # past its 60 s
    assert await read_at(now) == []
    assert len(set(statements)) == 1


@pytest.mark.parametrize(
    ("limit", "per_owner", "want"),
    [
        # Round-robin across owners: every owner's first before anyone's second; read oldest first
        # (A's are the oldest, then C's, then B's), as handlers and sequencers expect.
        (3, 5, ["a-1", "c-1", "b-1"]),
        (5, 5, ["a-1", "a-2", "c-1", "c-2", "b-1"]),
        (6, 5, ["a-1", "a-2", "a-3", "c-1", "c-2", "b-1"]),
        # The share per owner caps even a window with room to spare.
        (100, 1, ["a-1", "c-1", "b-1"]),
        (100, 2, ["a-1", "a-2", "c-1", "c-2", "b-1"]),
        (100, 5, ["a-1", "a-2", "a-3", "a-4", "a-5", "c-1", "c-2", "c-3", "c-4", "b-1"]),
    ],
)
async def test_window_shares(engine: AsyncEngine, limit: int, per_owner: int, want: list[str]) -> None:
    seed = await Seed(engine).tenancy()
    owners = {"AK1": seed.user_id}
    owners["AK2"] = await add_owner(engine, seed, "AK2", "bob")
    owners["AK3"] = await add_owner(engine, seed, "AK3", "carol")
    for tag, ak, n, age in (("a", "AK1", 50, 300), ("b", "AK2", 1, 100), ("c", "AK3", 4, 200)):
        await bulk_sessions(
            engine, n, tag=tag, access_key=ak, user_id=owners[ak], project_id=seed.project_id, age=age
        )
    assert [name for _, name in await window(engine, limit, per_owner)] == want


async def test_an_owners_share_is_its_highest_priority_first_and_counts_per_scaling_group(
    engine: AsyncEngine,
) -> None:
    seed = await Seed(engine).tenancy()
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO scaling_groups (name) VALUES ('gpu')"))
    await bulk_sessions(
        engine, 5, tag="low", access_key="AK1", user_id=seed.user_id, project_id=seed.project_id, age=500
    )
    await bulk_sessions(
        engine, 2, tag="high", access_key="AK1", user_id=seed.user_id, project_id=seed.project_id,
        age=10, priority=50,
    )  # fmt: skip
    await bulk_sessions(
        engine, 3, tag="gpu", access_key="AK1", user_id=seed.user_id, project_id=seed.project_id,
        scaling_group="gpu", age=400,
    )  # fmt: skip
    got = [name for _, name in await window(engine, per_owner=3)]
    # Oldest first, as handlers and sequencers expect; the share took both high-priority ones.
    assert got == ["low-1", "gpu-1", "gpu-2", "gpu-3", "high-1", "high-2"]


async def test_the_window_read_uses_indexes_at_ten_thousand_rows(engine: AsyncEngine) -> None:
    """A cluster's table is mostly ended sessions: 9,000 of them, 1,000 of A's waiting on a
    dependency and 10 of B's. The window reaches the few pending ones by index, never a scan, and
    their kernels through each session's own (a window's thousand rows may then be fetched by a
    hash join at this size: the planner's choice, linear either way)."""
    seed, bob = await two_owners(engine)
    dep = await seed.session(status=SessionStatus.RUNNING, agent_id="a1")
    await bulk_sessions(
        engine, 1000, tag="a", access_key="AK1", user_id=seed.user_id, project_id=seed.project_id,
        depends_on=dep,
    )  # fmt: skip
    await bulk_sessions(
        engine, 9000, tag="t", access_key="AK2", user_id=bob, project_id=seed.project_id,
        status=SessionStatus.TERMINATED, ended_age=60,
    )  # fmt: skip
    await bulk_sessions(engine, 10, tag="b", access_key="AK2", user_id=bob, project_id=seed.project_id)
    async with engine.begin() as conn:
        await conn.execute(text("ANALYZE"))
    query = sessions_query(PENDING, PENDING_KERNELS, window=PlacementWindow(), now=dt.datetime.now(dt.UTC))
    async with engine.connect() as conn:
        plan = "\n".join(r[0] for r in await conn.execute(Explain(query, analyze=True)))
    print(plan)  # for the record (pytest -s)
    assert "Seq Scan on sessions sessions_1" not in plan  # the window's own read of the table
    assert "Seq Scan on kernels" not in plan
    assert "ix_kernels_status" not in plan


class Explain(Executable, ClauseElement):
    """`EXPLAIN <statement>`, with the statement's bound parameters."""

    inherit_cache = False

    def __init__(self, statement: ClauseElement, analyze: bool = False) -> None:
        self.statement = statement
        self.analyze = analyze


@compiles(Explain)
def _explain(element: Explain, compiler: SQLCompiler, **kw: Any) -> str:
    return ("EXPLAIN ANALYZE " if element.analyze else "EXPLAIN ") + compiler.process(element.statement, **kw)
