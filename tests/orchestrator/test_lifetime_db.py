"""max_session_lifetime against real PostgreSQL: a session RUNNING longer than its keypair policy
allows is ended with LIFETIME_EXCEEDED (counted from when it started running), nothing else is."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Kernel, Keypair, KeypairResourcePolicy, Session, SessionSchedulingHistory
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from sokovan.orchestrator.schedule.handlers.lifecycle.enforce_lifetime import EnforceLifetime
from sokovan.orchestrator.schedule.handlers.promotion.promote_sessions import PromoteSessions
from sokovan.orchestrator.schedule.handlers.promotion.promotions import PROMOTE_TO_TERMINATED
from tests.orchestrator.db_seed import Seed, read_column, read_one


async def attach_policy(engine: AsyncEngine, lifetime: int | None, name: str = "p") -> None:
    async with engine.begin() as conn:
        await conn.execute(insert(KeypairResourcePolicy).values(name=name, max_session_lifetime=lifetime))
        await conn.execute(update(Keypair).where(Keypair.access_key == "AK1").values(resource_policy=name))


async def running_for(seed: Seed, seconds: float, status: SessionStatus = SessionStatus.RUNNING) -> uuid.UUID:
    """A session that entered `status` `seconds` ago (created an hour before that)."""
    now = dt.datetime.now(dt.UTC)
    return await seed.session(
        status=status,
        agent_id="a1",
        status_changed_at=now - dt.timedelta(seconds=seconds),
        created_at=now - dt.timedelta(seconds=seconds + 3600),
    )


async def cycle(engine: AsyncEngine) -> None:
    await ScheduleCoordinator(engine, ClusterConfig(), [EnforceLifetime(engine)]).cycle()


async def status(engine: AsyncEngine, sid: uuid.UUID) -> tuple[str, dict[str, object]]:
    row = await read_one(engine, select(Session.status, Session.status_info).where(Session.id == sid))
    return row.status, row.status_info


@pytest.mark.parametrize(
    ("lifetime", "seconds", "session_status", "ended"),
    [
        (60, 61, SessionStatus.RUNNING, True),
        (60, 3600, SessionStatus.RUNNING, True),
        # Counted from when it started running: an hour since creation is not a minute running.
        (60, 30, SessionStatus.RUNNING, False),
        # 0 and none are unlimited.
        (0, 10**6, SessionStatus.RUNNING, False),
        (None, 10**6, SessionStatus.RUNNING, False),
        # Only RUNNING sessions: the phases' timeouts rule the others.
        (60, 3600, SessionStatus.PREPARING, False),
        (60, 3600, SessionStatus.TERMINATING, False),
    ],
)
async def test_which_sessions_end(
    engine: AsyncEngine, lifetime: int | None, seconds: float, session_status: SessionStatus, ended: bool
) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    await attach_policy(engine, lifetime)
    sid = await running_for(seed, seconds, session_status)
    await cycle(engine)
    got, info = await status(engine, sid)
    if ended:
        assert got == SessionStatus.TERMINATING
        assert info["cause"] == "LIFETIME_EXCEEDED"
        assert info["message"] == f"ran longer than max_session_lifetime ({lifetime} s)"
    else:
        assert (got, info.get("cause")) == (session_status, None)


async def test_a_session_without_a_policy_is_never_ended(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    sid = await running_for(seed, 10**6)
    await cycle(engine)
    assert (await status(engine, sid))[0] == SessionStatus.RUNNING


async def test_the_ended_session_goes_the_normal_termination_path_with_history(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    await attach_policy(engine, 5)
    sid = await running_for(seed, 6)
    await cycle(engine)
    history = tuple(
        await read_one(
            engine,
            select(
                SessionSchedulingHistory.handler,
                SessionSchedulingHistory.result,
                SessionSchedulingHistory.from_status,
                SessionSchedulingHistory.to_status,
            ).where(SessionSchedulingHistory.session_id == sid),
        )
    )
    assert history == ("EnforceLifetime", "SUCCESS", "RUNNING", "TERMINATING")
    # Kernels are left to TerminateSessions (the agents stop them); once they ended, the session
    # ends ERROR / FAILURE with its cause.
    assert await read_column(engine, select(Kernel.status).where(Kernel.session_id == sid)) == ["RUNNING"]
    async with engine.begin() as conn:
        await conn.execute(
            update(Kernel).where(Kernel.session_id == sid).values(status=KernelStatus.TERMINATED.value)
        )
    await ScheduleCoordinator(engine, ClusterConfig(), [PromoteSessions(PROMOTE_TO_TERMINATED)]).cycle()
    row = await read_one(
        engine, select(Session.status, Session.result, Session.status_info).where(Session.id == sid)
    )
    assert (row.status, row.result, row.status_info["cause"]) == ("ERROR", "FAILURE", "LIFETIME_EXCEEDED")


async def test_a_policy_changed_live_applies_at_the_next_cycle(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    await attach_policy(engine, 0)
    sid = await running_for(seed, 120)
    await cycle(engine)
    assert (await status(engine, sid))[0] == SessionStatus.RUNNING
    async with engine.begin() as conn:
        await conn.execute(update(KeypairResourcePolicy).values(max_session_lifetime=100))
    await cycle(engine)
    assert (await status(engine, sid))[0] == SessionStatus.TERMINATING
