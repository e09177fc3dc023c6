"""Followed promotions (PromoteToPrepared, PromoteToRunning) are left by a lane's hinted cycles to
the event path, which promotes the sessions as the agents' events arrive: no read for sessions the
event path has moved or is moving, and no race for the same write (and its stale history row). The
long cycle, the safety net, runs them over every session."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.events import KernelRunning
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Kernel, Session, SessionSchedulingHistory
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from sokovan.orchestrator.schedule.handlers.promotion.promote_sessions import PromoteSessions
from sokovan.orchestrator.schedule.handlers.promotion.promotions import DETECT_TERMINATION, PROMOTE_TO_RUNNING
from sokovan.state.kernel_events import KernelEventApplier
from sokovan.state.session_queries import BATCH_LIMIT, kept
from sokovan.state.session_reads import fetch_sessions
from tests.orchestrator.db_seed import Seed

S, K = SessionStatus, KernelStatus


async def started(engine: AsyncEngine, seed: Seed) -> uuid.UUID:
    """A CREATING session whose one kernel an agent just reported running."""
    sid = await seed.session(status=S.CREATING, agent_id="a1", kernel_status=K.CREATING)
    async with engine.connect() as conn:
        kid = (await conn.execute(select(Kernel.id).where(Kernel.session_id == sid))).scalar_one()
    moved = await KernelEventApplier(engine).apply_many(
        [KernelRunning(kernel_id=str(kid), agent_id="a1", session_id=str(sid))]
    )
    assert len(moved) == 1
    return sid


async def status(engine: AsyncEngine, sid: uuid.UUID) -> str:
    async with engine.connect() as conn:
        return str((await conn.execute(select(Session.status).where(Session.id == sid))).scalar_one())


def lanes(engine: AsyncEngine) -> ScheduleCoordinator:
    handlers = [PromoteSessions(PROMOTE_TO_RUNNING), PromoteSessions(DETECT_TERMINATION)]
    return ScheduleCoordinator(engine, ClusterConfig(), {"start": handlers})


async def test_a_hinted_cycle_leaves_a_session_whose_kernels_just_moved(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    sid = await started(engine, seed)
    coordinator = lanes(engine)
    assert not await coordinator.cycle_lane("start", short=True)
    assert await status(engine, sid) == "CREATING"
    # The event path (focused, as `follow_kernels` runs it) moves it, and nothing was stale.
    await coordinator.run_handler(PromoteSessions(PROMOTE_TO_RUNNING).focused([sid]))
    assert await status(engine, sid) == "RUNNING"
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(SessionSchedulingHistory.from_status, SessionSchedulingHistory.to_status).where(
                    SessionSchedulingHistory.session_id == sid
                )
            )
        ).all()
    assert [tuple(r) for r in rows] == [("CREATING", "RUNNING")]


async def test_a_hinted_cycle_never_runs_them_and_the_long_cycle_takes_every_session(
    engine: AsyncEngine,
) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    settled_sid, fresh_sid = await started(engine, seed), await started(engine, seed)
    async with engine.begin() as conn:  # the event path failed a while ago
        await conn.execute(
            update(Kernel)
            .where(Kernel.session_id == settled_sid)
            .values(status_changed_at=Kernel.status_changed_at - dt.timedelta(seconds=30))
        )
    coordinator = lanes(engine)
    assert not await coordinator.cycle_lane("start", short=True)
    assert (await status(engine, settled_sid), await status(engine, fresh_sid)) == ("CREATING", "CREATING")
    assert await coordinator.cycle_lane("start")
    assert (await status(engine, settled_sid), await status(engine, fresh_sid)) == ("RUNNING", "RUNNING")


async def test_a_promotion_the_event_path_does_not_follow_is_not_held_back(engine: AsyncEngine) -> None:
    detect = PromoteSessions(DETECT_TERMINATION)
    assert lanes(engine).for_short_cycle(detect) is detect
    assert lanes(engine).for_short_cycle(PromoteSessions(PROMOTE_TO_RUNNING)) is None


async def test_the_event_paths_read_is_kept_and_reads_each_focus_of_its_own(
    engine: AsyncEngine,
) -> None:
    """The focused read keeps one statement per promotion, whatever the sessions: they are bound at
    each read."""
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    first, second = await started(engine, seed), await started(engine, seed)
    now = dt.datetime.now(dt.UTC)
    spec = PromoteSessions(PROMOTE_TO_RUNNING)
    shapes = [spec.focused([first]).narrowing(now), spec.focused([second]).narrowing(now + dt.timedelta(1))]
    assert shapes[0] is not None and shapes[1] is not None
    statements = [
        kept(spec.targets, spec.kernels.statuses, BATCH_LIMIT, spec.kernels.match, None, n) for n in shapes
    ]
    assert statements[0] is statements[1]
    coordinator = lanes(engine)
    # Each focused run reads its own session only.
    assert await coordinator.run_handler(spec.focused([first]))
    assert (await status(engine, first), await status(engine, second)) == ("RUNNING", "CREATING")
    assert await coordinator.run_handler(spec.focused([second]))
    assert await status(engine, second) == "RUNNING"


async def test_a_narrowing_holds_with_a_read_of_stuck_sessions_too(engine: AsyncEngine) -> None:
    """`changed_before` builds the statement at the read; the narrowing is still applied and bound."""
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    first, second = await started(engine, seed), await started(engine, seed)
    now = dt.datetime.now(dt.UTC)
    focus = PromoteSessions(PROMOTE_TO_RUNNING).focused([second]).narrowing(now)
    async with engine.connect() as conn:
        rows = await fetch_sessions(
            conn, frozenset({S.CREATING}), changed_before=now + dt.timedelta(seconds=60), narrowing=focus
        )
        every = await fetch_sessions(
            conn, frozenset({S.CREATING}), changed_before=now + dt.timedelta(seconds=60)
        )
    assert [r.id for r in rows] == [second]
    assert sorted(r.id for r in every) == sorted([first, second])
