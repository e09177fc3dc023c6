"""Kernel events against real PostgreSQL: guarded, ordered, never backwards, only from the
kernel's own agent."""

from __future__ import annotations

import asyncio
import uuid

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.events import KernelPrepared, KernelPulling, KernelRunning, KernelTerminated
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Kernel, KernelSchedulingHistory
from sokovan.state.kernel_events import KernelEventApplier
from tests.orchestrator.db_seed import Seed, read_column, session_kernel
from tests.support import statements_sent


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


async def test_a_round_of_events_is_one_statement_of_its_own(engine: AsyncEngine) -> None:
    """Events of many kernels, one each, are one statement (run with no transaction around it)."""
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=64)
    sids = [
        await seed.session(status=SessionStatus.CREATING, kernel_status=KernelStatus.CREATING, agent_id="a1")
        for _ in range(5)
    ]
    kids = [(await kernel_of(engine, sid))[0] for sid in sids]
    events = [
        KernelRunning(agent_id="a1", kernel_id=str(k), session_id=str(s))
        for k, s in zip(kids, sids, strict=True)
    ]
    with statements_sent(engine) as sent:
        moved = await KernelEventApplier(engine).apply_many(events)
    assert len(sent) == 1
    assert [m.kernel_id for m in moved] == kids and {m.from_status for m in moved} == {"CREATING"}
    assert [(await kernel_of(engine, sid))[1] for sid in sids] == ["RUNNING"] * 5


async def test_an_event_waits_for_a_concurrent_writer_and_judges_what_it_left(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    sid = await seed.session(status=SessionStatus.RUNNING, kernel_status=KernelStatus.RUNNING, agent_id="a1")
    kid, _, _ = await kernel_of(engine, sid)
    ev = {"agent_id": "a1", "kernel_id": str(kid), "session_id": str(sid)}
    async with engine.begin() as first:
        await first.execute(update(Kernel).where(Kernel.id == kid).values(status="TERMINATED", exit_code=3))
        late = asyncio.create_task(
            KernelEventApplier(engine).apply_many([KernelTerminated(exit_code=0, **ev)])
        )
        await asyncio.sleep(0.3)
        assert not late.done()  # waiting for the first writer's lock
    assert await late == []  # TERMINATED already: nothing moves, the first writer's exit code stays
    assert (await kernel_of(engine, sid))[1:] == ("TERMINATED", 3)


async def test_an_event_that_waited_moves_the_kernel_from_where_the_writer_left_it(
    engine: AsyncEngine,
) -> None:
    """The lane moves the kernel SCHEDULED -> PREPARING and holds its lock while the agent's
    `prepared` event (which expects PREPARING) arrives: the event waits, then moves it."""
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    sid = await seed.session(
        status=SessionStatus.SCHEDULED, kernel_status=KernelStatus.SCHEDULED, agent_id="a1"
    )
    kid, _, _ = await kernel_of(engine, sid)
    ev = {"agent_id": "a1", "kernel_id": str(kid), "session_id": str(sid)}
    async with engine.begin() as first:
        await first.execute(update(Kernel).where(Kernel.id == kid).values(status="PREPARING"))
        late = asyncio.create_task(KernelEventApplier(engine).apply_many([KernelPrepared(**ev)]))
        await asyncio.sleep(0.3)
        assert not late.done()
    moved = await late
    assert [(m.from_status, m.to_status) for m in moved] == [("PREPARING", "PREPARED")]
    assert (await kernel_of(engine, sid))[1] == "PREPARED"
