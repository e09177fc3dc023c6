"""Allocation against real PostgreSQL: racing managers, the invariants, persisted round-robin,
and validators that end a session."""

from __future__ import annotations

import asyncio
import uuid

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Kernel, ScalingGroup, Session
from sokovan.orchestrator.provisioner.allocator import RepositoryAllocator
from sokovan.orchestrator.provisioner.build import provisioner_for
from sokovan.orchestrator.provisioner.invariants import check_invariants
from sokovan.orchestrator.provisioner.loader import load_snapshots
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from sokovan.orchestrator.schedule.handlers.lifecycle.schedule_new_sessions import ScheduleNewSessions
from sokovan.state.session_reads import fetch_sessions
from tests.orchestrator.db_seed import Seed
from tests.support import statements_sent


async def invariants(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return await check_invariants(conn)


async def _race(
    engine: AsyncEngine, db_url: str, split: bool
) -> tuple[list[uuid.UUID], dict[uuid.UUID, str]]:
    """Two "managers" (own engines) plan over the same picture, then commit at the same time.

    With `split`, they claim different sessions (and collide on agents); without, the same ones.
    """
    managers = [create_async_engine(db_url) for _ in range(2)]
    plans = []
    for i, eng in enumerate(managers):
        async with eng.connect() as conn:
            pending = await fetch_sessions(conn, frozenset({SessionStatus.PENDING}))
            if split:
                pending = pending[i::2]
            snap = (await load_snapshots(conn, pending))["default"]
            plans.append(provisioner_for(snap).plan(pending, snap))
    assert all(len(p.placements) == 8 for p in plans)

    async def commit(eng: AsyncEngine, plan: object) -> tuple[list[uuid.UUID], dict[uuid.UUID, str]]:
        async with eng.begin() as conn:
            return await RepositoryAllocator().allocate(conn, plan)  # type: ignore[arg-type]

    results = await asyncio.gather(*(commit(e, p) for e, p in zip(managers, plans, strict=True)))
    for eng in managers:
        await eng.dispose()
    return [sid for ok, _ in results for sid in ok], {sid: why for _, c in results for sid, why in c.items()}


async def test_two_managers_racing_for_the_same_agents_never_over_allocate(
    engine: AsyncEngine, db_url: str
) -> None:
    seed = await Seed(engine).tenancy()
    for name in ("a1", "a2"):
        await seed.agent(name, cpu=4)
    for _ in range(16):
        await seed.session(cpu=1)
    committed, conflicts = await _race(engine, db_url, split=True)
    assert len(committed) == 8  # 2 agents x 4 cpu: exactly full, never more
    assert len(conflicts) == 8 and all("filled up meanwhile" in why for why in conflicts.values())
    assert await invariants(engine) == []


async def test_two_managers_claiming_the_same_sessions_bind_each_once(
    engine: AsyncEngine, db_url: str
) -> None:
    seed = await Seed(engine).tenancy()
    for name in ("a1", "a2"):
        await seed.agent(name, cpu=4)
    for _ in range(8):
        await seed.session(cpu=1)
    committed, conflicts = await _race(engine, db_url, split=False)
    assert len(committed) == 8 and len(set(committed)) == 8
    assert len(conflicts) == 8 and all("placed meanwhile" in why for why in conflicts.values())
    assert await invariants(engine) == []


async def test_invariants_catch_a_leaked_kernel_and_an_overfull_agent(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=2)
    ended = await seed.session(
        cpu=1, status=SessionStatus.TERMINATED, kernel_status=KernelStatus.RUNNING, agent_id="a1"
    )
    await seed.session(cpu=2, status=SessionStatus.RUNNING, agent_id="a1")
    problems = await invariants(engine)
    assert any("live in a TERMINATED session" in p for p in problems), problems
    assert any("agent a1 over capacity in cpu" in p for p in problems), problems
    async with engine.begin() as conn:
        await conn.execute(update(Kernel).where(Kernel.session_id == ended).values(status="TERMINATED"))
    assert await invariants(engine) == []


async def test_round_robin_order_persists_across_cycles(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    async with engine.begin() as conn:
        await conn.execute(update(ScalingGroup).values(agent_selection="roundrobin"))
    for name in ("a", "b", "c"):
        await seed.agent(name, cpu=8)
    picked = []
    for _ in range(4):
        sid = await seed.session(cpu=1)
        # A new coordinator each time, as if another manager ran the next cycle.
        await ScheduleCoordinator(engine, ClusterConfig(), [ScheduleNewSessions(engine)]).cycle()
        async with engine.connect() as conn:
            picked.append(await conn.scalar(select(Kernel.agent_id).where(Kernel.session_id == sid)))
    assert picked == ["a", "b", "c", "a"]


async def test_failed_dependency_cancels_the_dependent(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    failed = await seed.session(status=SessionStatus.ERROR, kernel_status=KernelStatus.ERROR)
    done = await seed.session(status=SessionStatus.TERMINATED, kernel_status=KernelStatus.TERMINATED)
    running = await seed.session(status=SessionStatus.RUNNING, agent_id="a1")
    async with engine.begin() as conn:
        await conn.execute(update(Session).where(Session.id == done).values(result="SUCCESS"))
    from sokovan.db.models import SessionDependency

    doomed = await seed.session()
    waits = await seed.session()
    ok = await seed.session()
    async with engine.begin() as conn:
        await conn.execute(
            SessionDependency.__table__.insert(),
            [
                {"session_id": doomed, "depends_on": failed},
                {"session_id": waits, "depends_on": running},
                {"session_id": ok, "depends_on": done},
            ],
        )
    await ScheduleCoordinator(engine, ClusterConfig(), [ScheduleNewSessions(engine)]).cycle()
    async with engine.connect() as conn:
        rows = {
            r.id: r
            for r in await conn.execute(
                select(Session.id, Session.status, Session.status_info, Session.result).where(
                    Session.id.in_([doomed, waits, ok])
                )
            )
        }
        cancelled_kernels = await conn.scalar(
            select(func.count())
            .select_from(Kernel)
            .where(Kernel.session_id == doomed, Kernel.status == "CANCELLED")
        )
    assert (rows[doomed].status, rows[doomed].status_info["cause"], rows[doomed].result) == (
        "CANCELLED",
        "DEPENDENCY_FAILED",
        "FAILURE",
    )
    assert cancelled_kernels == 1
    assert rows[waits].status == "PENDING"
    assert rows[waits].status_info["pending_reason"] == f"waiting for dependencies: {running} (RUNNING)"
    assert rows[ok].status == "SCHEDULED"


async def test_a_plan_that_fits_is_bound_in_two_statements(engine: AsyncEngine) -> None:
    """The agents locked, then the whole plan bound by one statement that checks it fits."""
    seed = await Seed(engine).tenancy()
    for name in ("a1", "a2"):
        await seed.agent(name, cpu=4)
    for _ in range(6):
        await seed.session(cpu=1, size=2)
    async with engine.connect() as conn:
        pending = await fetch_sessions(conn, frozenset({SessionStatus.PENDING}))
        snap = (await load_snapshots(conn, pending))["default"]
    plan = provisioner_for(snap).plan(pending, snap)
    assert len(plan.placements) == 4  # 2 agents x 4 cpu, 2 kernels of 1 cpu each
    with statements_sent(engine) as sent:
        async with engine.begin() as conn:
            committed, conflicts = await RepositoryAllocator().allocate(conn, plan)
    assert len(sent) == 2 and conflicts == {}
    assert sorted(committed) == sorted(p.session_id for p in plan.placements)
    async with engine.connect() as conn:
        placed = await conn.scalar(select(func.count()).where(Kernel.agent_id.is_not(None)))
    assert placed == 8
    assert await invariants(engine) == []
