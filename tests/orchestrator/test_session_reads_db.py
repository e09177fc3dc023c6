"""A batch of sessions is read with its kernels (and, for waiting sessions, their dependencies)
in one statement, against real PostgreSQL: each session carries its own kernels in cluster order,
with their agents' addresses, slots, exit codes and status_info."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import insert, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Kernel, SessionDependency
from sokovan.state.session_reads import fetch_sessions
from tests.orchestrator.db_seed import Seed
from tests.support import statements_sent

S, K = SessionStatus, KernelStatus


async def test_sessions_with_their_kernels_and_dependencies_are_one_statement(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=64)
    running = await seed.session(status=S.RUNNING, size=3, cpu=2, agent_id="a1")
    ended = await seed.session(status=S.TERMINATED, kernel_status=K.TERMINATED, agent_id="a1")
    waiting = await seed.session(status=S.PENDING)
    alone = await seed.session(status=S.PENDING)
    async with engine.begin() as conn:
        await conn.execute(insert(SessionDependency).values(session_id=waiting, depends_on=ended))
        await conn.execute(insert(SessionDependency).values(session_id=waiting, depends_on=running))
        await conn.execute(
            update(Kernel)
            .where(Kernel.session_id == running, Kernel.cluster_idx == 1)
            .values(exit_code=7, status_info={"note": "n"})
        )
    async with engine.connect() as conn:
        with statements_sent(engine) as sent:
            pending = await fetch_sessions(conn, frozenset({S.PENDING}))
            live = await fetch_sessions(conn, frozenset({S.RUNNING}))
    assert len(sent) == 2  # one per read
    by_id = {s.id: s for s in pending}
    assert set(by_id[waiting].depends_on) == {ended, running} and by_id[alone].depends_on == ()
    assert [len(s.kernels) for s in pending] == [1, 1]
    (session,) = live
    assert [k.cluster_idx for k in session.kernels] == [0, 1, 2]
    assert [k.cluster_role for k in session.kernels] == ["main", "sub", "sub"]
    assert {k.agent_id for k in session.kernels} == {"a1"}
    assert {k.agent_addr for k in session.kernels} == {"127.0.0.1:1"}
    assert {k.status for k in session.kernels} == {K.RUNNING}
    assert session.kernels[0].occupied_slots == {"cpu": Decimal(2), "mem": Decimal(2**30)}
    assert (session.kernels[1].exit_code, session.kernels[1].status_info) == (7, {"note": "n"})
    assert (session.kernels[0].exit_code, session.kernels[0].status_info) == (None, {})
