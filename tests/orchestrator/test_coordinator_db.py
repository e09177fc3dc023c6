"""The ScheduleCoordinator and its writes, against real PostgreSQL."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

from sqlalchemy import func, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.rpc import AgentRPCClient
from sokovan.common.types import KernelStatus, SchedulingResult, SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Kernel, Session, SessionSchedulingHistory
from sokovan.orchestrator.locks import CycleLock, lock_key
from sokovan.orchestrator.orchestrator import session_handlers
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from sokovan.orchestrator.schedule.handlers.lifecycle.schedule_new_sessions import ScheduleNewSessions
from sokovan.state.occupancy import agent_occupancy
from sokovan.state.session_writes import SessionTransition, apply_session_transitions
from tests.orchestrator.db_seed import Seed, read_column, read_one


async def status_of(engine: AsyncEngine, sid: uuid.UUID) -> tuple[str, dict[str, object], str | None]:
    row = await read_one(
        engine, select(Session.status, Session.status_info, Session.result).where(Session.id == sid)
    )
    return row.status, row.status_info, row.result


async def kernel_statuses(engine: AsyncEngine, sid: uuid.UUID) -> list[str]:
    return await read_column(engine, select(Kernel.status).where(Kernel.session_id == sid))


async def test_guarded_transition_records_stale_rows_instead_of_overwriting(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    sid = await seed.session(status=SessionStatus.RUNNING)
    move = SessionTransition(
        session_id=sid,
        expected=frozenset({SessionStatus.PENDING}),
        to_status=SessionStatus.SCHEDULED,
        handler="test",
        result=SchedulingResult.SUCCESS,
    )
    async with engine.begin() as conn:
        applied = await apply_session_transitions(conn, [move])
    assert applied.stale == [sid] and applied.applied == []
    assert (await status_of(engine, sid))[0] == "RUNNING"
    async with engine.connect() as conn:
        message = await conn.scalar(
            select(SessionSchedulingHistory.message).where(SessionSchedulingHistory.session_id == sid)
        )
    assert message is not None and message.startswith("stale")


async def test_schedule_places_sessions_and_explains_the_ones_that_wait(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=4)
    await seed.agent("a2", cpu=2)
    fits = await seed.session(cpu=3)
    too_big_now = await seed.session(cpu=4)
    coordinator = ScheduleCoordinator(engine, ClusterConfig(), [ScheduleNewSessions(engine)])
    assert await coordinator.cycle()
    assert (await status_of(engine, fits))[0] == "SCHEDULED"
    assert await kernel_statuses(engine, fits) == ["SCHEDULED"]
    status, info, _ = await status_of(engine, too_big_now)
    assert status == "PENDING"
    assert info["pending_reason"] == "0/2 agents fit: 2 insufficient cpu"
    # The same reason again is not written again (no history spam on every cycle).
    await coordinator.cycle()
    async with engine.connect() as conn:
        rows = await conn.scalar(
            select(func.count())
            .select_from(SessionSchedulingHistory)
            .where(SessionSchedulingHistory.session_id == too_big_now)
        )
    assert rows == 1


async def test_pending_timeout_cancels_with_scheduler_timeout(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy(pending_timeout=1)
    sid = await seed.session(cpu=64)
    await seed.agent("a1", cpu=4)
    async with engine.begin() as conn:
        await conn.execute(
            update(Session)
            .where(Session.id == sid)
            .values(status_changed_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5))
        )
    await ScheduleCoordinator(engine, ClusterConfig(), [ScheduleNewSessions(engine)]).cycle()
    status, info, result = await status_of(engine, sid)
    assert (status, info["cause"], result) == ("CANCELLED", "SCHEDULER_TIMEOUT", "FAILURE")
    assert await kernel_statuses(engine, sid) == ["CANCELLED"]


async def test_concurrent_schedulers_never_over_allocate_an_agent(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=4)
    for _ in range(12):
        await seed.session(cpu=1)
    coordinators = [
        ScheduleCoordinator(engine, ClusterConfig(), [ScheduleNewSessions(engine)]) for _ in range(4)
    ]
    # Without the cycle lock the allocator's row locks alone must keep the agent within capacity.
    await asyncio.gather(*(c.cycle() for c in coordinators))
    async with engine.connect() as conn:
        occupied, counts = await agent_occupancy(conn)
    assert occupied["a1"]["cpu"] <= 4
    assert counts["a1"] == 4


async def test_cycle_lock_lets_one_manager_cycle_at_a_time(engine: AsyncEngine) -> None:
    """Two managers: the first to ask holds the lane, and keeps it between cycles (no round trip
    per cycle); the other skips it until the holder lets go (stops, or its connection dies)."""
    one, other = CycleLock(engine, retry_after=0), CycleLock(engine, retry_after=0)
    try:
        async with one.hold("schedule") as first, other.hold("schedule") as second:
            assert (first, second) == (True, False)
        async with other.hold("schedule") as still_not:
            assert not still_not
        assert one.holds("schedule") and not other.holds("schedule")
        await one.release_all()
        async with other.hold("schedule") as taken_over:
            assert taken_over
    finally:
        await one.release_all()
        await other.release_all()


def _worker_lock(engine: AsyncEngine, index: int, manager: str) -> CycleLock:
    """Worker `index` of two of manager `manager`: lane "a" is worker 0's, lane "b" worker 1's."""
    owners = {"a": 0, "b": 1}
    return CycleLock(
        engine,
        retry_after=0,
        adopt_after=0,
        adopt_every=0,
        mine=lambda name: owners[name] == index,
        presence=f"worker:{manager}:{index}",
        owner=lambda name: f"worker:{manager}:{owners[name]}",
    )


async def test_a_late_worker_gets_its_lane_back_from_the_one_that_adopted_it(engine: AsyncEngine) -> None:
    """Worker 0 of a manager comes up alone and adopts worker 1's lane; once worker 1 is up (its
    presence lock held), worker 0 hands the lane back and worker 1 takes it. While worker 1 is up,
    worker 0 does not adopt it again; once worker 1 is gone, it does."""
    manager = uuid.uuid4().hex
    first = _worker_lock(engine, 0, manager)
    late = _worker_lock(engine, 1, manager)
    try:
        assert await first.acquire("a") and await first.acquire("b")  # worker 1 is not up: adopted
        assert not await late.acquire("b")  # worker 1 starts, refused while worker 0 holds it
        assert not await first.acquire("b")  # worker 1 is present: handed back
        assert not first.holds("b")
        assert await late.acquire("b") and late.holds("b")
        assert not await first.acquire("b")  # worker 1 present: no adoption
        assert await first.acquire("a")  # its own lane stays its own
        await late.release_all()  # worker 1 gone (its presence lock with it)
        assert await first.acquire("b")
        other = _worker_lock(engine, 1, uuid.uuid4().hex)  # worker 1 of another manager, up
        try:
            assert not await other.acquire("b")
            assert await first.acquire("b")  # not this manager's worker: kept
        finally:
            await other.release_all()
    finally:
        await first.release_all()
        await late.release_all()


async def test_a_lost_lock_connection_gives_the_lanes_up(engine: AsyncEngine) -> None:
    one, other = CycleLock(engine, retry_after=0), CycleLock(engine, retry_after=0)
    try:
        assert await one.acquire("schedule.place")
        async with engine.connect() as admin:  # PostgreSQL drops the holder's connection
            await admin.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks "
                    "WHERE locktype = 'advisory' AND objid::bigint = :low AND granted"
                ),
                {"low": lock_key("schedule.place") & 0xFFFFFFFF},
            )
        for _ in range(50):  # the server's goodbye reaches the client asynchronously
            if await other.acquire("schedule.place"):
                break
            await asyncio.sleep(0.05)
        assert other.holds("schedule.place")
        await asyncio.sleep(0.2)  # the holder's client reads the server's goodbye
        assert not await one.acquire("schedule.place")  # noticed the loss, asked again: refused
        assert not one.holds("schedule.place")
    finally:
        await one.release_all()
        await other.release_all()


async def test_promotions_follow_kernel_statuses_to_the_end(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    ok = await seed.session(
        status=SessionStatus.CREATING, kernel_status=KernelStatus.TERMINATED, agent_id="a1"
    )
    async with engine.begin() as conn:
        await conn.execute(update(Kernel).where(Kernel.session_id == ok).values(exit_code=0))
    failed = await seed.session(status=SessionStatus.RUNNING, kernel_status=KernelStatus.ERROR, agent_id="a1")
    async with engine.begin() as conn:
        await conn.execute(
            update(Kernel)
            .where(Kernel.session_id == failed)
            .values(
                exit_code=3,
                status_info={"cause": "KERNEL_NONZERO_EXIT", "message": "kernel exited with code 3"},
            )
        )
    coordinator = ScheduleCoordinator(engine, ClusterConfig(), session_handlers(engine, AgentRPCClient("x")))
    for _ in range(4):
        await coordinator.cycle()
    status, info, result = await status_of(engine, ok)
    assert (status, result, info.get("cause")) == ("TERMINATED", "SUCCESS", None)
    status, info, result = await status_of(engine, failed)
    assert (status, result, info["cause"], info["exit_code"]) == (
        "ERROR",
        "FAILURE",
        "KERNEL_NONZERO_EXIT",
        3,
    )
    handlers = await read_column(
        engine,
        select(SessionSchedulingHistory.handler)
        .where(SessionSchedulingHistory.session_id == ok)
        .order_by(SessionSchedulingHistory.id),
    )
    assert handlers == ["PromoteToRunning", "DetectTermination", "PromoteToTerminated"]


async def test_a_session_stuck_preparing_past_the_pull_timeout_is_ended(engine: AsyncEngine) -> None:
    from sokovan.config.cluster import PhaseLimit, PhaseSettings
    from sokovan.orchestrator.schedule.handlers.promotion.promote_sessions import PromoteSessions
    from sokovan.orchestrator.schedule.handlers.promotion.promotions import PROMOTE_TO_PREPARED

    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    stuck = await seed.session(
        status=SessionStatus.PREPARING, kernel_status=KernelStatus.PULLING, agent_id="a1"
    )
    fresh = await seed.session(
        status=SessionStatus.PREPARING, kernel_status=KernelStatus.PULLING, agent_id="a1"
    )
    async with engine.begin() as conn:
        await conn.execute(
            update(Session)
            .where(Session.id == stuck)
            .values(status_changed_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60))
        )
    config = ClusterConfig()
    config.phases = PhaseSettings(pulling=PhaseLimit(timeout=30, max_tries=3))
    await ScheduleCoordinator(engine, config, [PromoteSessions(PROMOTE_TO_PREPARED)]).cycle()
    status, info, _ = await status_of(engine, stuck)
    assert (status, info["cause"]) == ("TERMINATING", "SCHEDULER_TIMEOUT")
    assert (await status_of(engine, fresh))[0] == "PREPARING"


async def test_a_session_left_prepared_with_running_kernels_is_promoted(engine: AsyncEngine) -> None:
    """A manager killed after the start RPC but before recording CREATING."""
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    started = await seed.session(
        status=SessionStatus.PREPARED, kernel_status=KernelStatus.RUNNING, agent_id="a1"
    )
    waiting = await seed.session(
        status=SessionStatus.PREPARED, kernel_status=KernelStatus.PREPARED, agent_id="a1"
    )
    from sokovan.orchestrator.schedule.handlers.promotion.promote_sessions import PromoteSessions
    from sokovan.orchestrator.schedule.handlers.promotion.promotions import PROMOTE_TO_RUNNING

    await ScheduleCoordinator(engine, ClusterConfig(), [PromoteSessions(PROMOTE_TO_RUNNING)]).cycle()
    assert (await status_of(engine, started))[0] == "RUNNING"
    assert (await status_of(engine, waiting))[0] == "PREPARED"
