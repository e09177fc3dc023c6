"""Kernel events against real PostgreSQL: guarded, ordered, never backwards, only from the
kernel's own agent."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.events import KernelPrepared, KernelPulling, KernelRunning, KernelTerminated
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Kernel, KernelSchedulingHistory
from sokovan.state.kernel_events import KernelEventApplier
from tests.orchestrator.db_seed import Seed, read_column, session_kernel


async def kernel_of(engine: AsyncEngine, sid: uuid.UUID) -> tuple[uuid.UUID, str, int | None]:
    return await session_kernel(engine, sid, Kernel.exit_code)


async def test_events_apply_in_order_and_late_ones_never_move_a_kernel_back(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    sid = await seed.session(
        status=SessionStatus.PREPARING, kernel_status=KernelStatus.PREPARING, agent_id="a1"
    )
    kid, _, _ = await kernel_of(engine, sid)
    applier = KernelEventApplier(engine)
    ev = {"agent_id": "a1", "kernel_id": str(kid), "session_id": str(sid)}
    moved = await applier.apply_many([KernelPulling(**ev), KernelPrepared(**ev)])
    assert [m.to_status for m in moved] == ["PREPARED"]  # the pulling step folded into prepared
    assert moved[0].owner == str(seed.user_id)
    assert (await kernel_of(engine, sid))[1] == "PREPARED"
    await applier.apply_many([KernelRunning(**ev), KernelTerminated(exit_code=0, **ev)])
    assert (await kernel_of(engine, sid))[1:] == ("TERMINATED", 0)
    # Late, repeated and out-of-order events change nothing now.
    for late in (KernelRunning(**ev), KernelPulling(**ev), KernelTerminated(exit_code=9, **ev)):
        assert await applier.apply_many([late]) == []
    assert (await kernel_of(engine, sid))[1:] == ("TERMINATED", 0)
    trail = await read_column(
        engine,
        select(KernelSchedulingHistory.to_status)
        .where(KernelSchedulingHistory.kernel_id == kid)
        .order_by(KernelSchedulingHistory.id),
    )
    assert trail == ["PREPARED", "TERMINATED"]


async def test_events_from_another_agent_are_ignored(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    await seed.agent("a2")
    sid = await seed.session(status=SessionStatus.RUNNING, kernel_status=KernelStatus.RUNNING, agent_id="a1")
    kid, _, _ = await kernel_of(engine, sid)
    stray = KernelTerminated(agent_id="a2", kernel_id=str(kid), session_id=str(sid), exit_code=0)
    assert await KernelEventApplier(engine).apply_many([stray]) == []
    assert (await kernel_of(engine, sid))[1] == "RUNNING"
