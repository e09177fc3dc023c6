"""The census gauges against real PostgreSQL: sessions by live status, the oldest PENDING
session's wait, deployments by status; a status that empties reads 0; counts at most every
`every` seconds."""

from __future__ import annotations

import datetime as dt
import uuid

from prometheus_client import REGISTRY
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import EndpointLifecycle, SessionStatus
from sokovan.db.models import Session
from sokovan.orchestrator.maintenance.census import Census
from tests.orchestrator.db_seed import Seed

S = SessionStatus
E = EndpointLifecycle
NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def sessions(status: SessionStatus) -> float | None:
    return REGISTRY.get_sample_value("sokovan_sessions", {"status": status.value})


def deployments(status: EndpointLifecycle) -> float | None:
    return REGISTRY.get_sample_value("sokovan_deployments", {"status": status.value})


def oldest_pending() -> float | None:
    return REGISTRY.get_sample_value("sokovan_session_pending_oldest_seconds")


async def session_since(seed: Seed, status: SessionStatus, seconds_ago: float) -> uuid.UUID:
    sid = await seed.session(status=status)
    async with seed.engine.begin() as conn:
        await conn.execute(
            update(Session)
            .where(Session.id == sid)
            .values(status_changed_at=NOW - dt.timedelta(seconds=seconds_ago))
        )
    return sid


async def test_counts_live_sessions_and_deployments_by_status(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    for status, seconds_ago in [(S.PENDING, 30), (S.PENDING, 700), (S.RUNNING, 5), (S.TERMINATED, 9999)]:
        await session_since(seed, status, seconds_ago)
    for lifecycle in (E.READY, E.READY, E.SCALING, E.DESTROYED):
        await seed.deployment(lifecycle)

    await Census(engine).run(NOW)

    want_sessions = {S.PENDING: 2, S.RUNNING: 1, S.SCHEDULED: 0, S.TERMINATING: 0}
    assert {s: sessions(s) for s in want_sessions} == want_sessions
    assert all(sessions(s) is None for s in S.terminal()), "terminal statuses are not counted"
    assert oldest_pending() == 700.0
    want_deployments = {E.READY: 2, E.SCALING: 1, E.PENDING: 0, E.DESTROYING: 0}
    assert {e: deployments(e) for e in want_deployments} == want_deployments
    assert deployments(E.DESTROYED) is None


async def test_a_status_that_empties_reads_zero(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    sid = await session_since(seed, S.PENDING, 60)
    census = Census(engine)
    await census.run(NOW)
    assert (sessions(S.PENDING), oldest_pending()) == (1, 60.0)

    async with engine.begin() as conn:
        await conn.execute(update(Session).where(Session.id == sid).values(status=S.CANCELLED.value))
    await census.run(NOW)

    assert (sessions(S.PENDING), oldest_pending()) == (0, 0.0)


async def test_counts_at_most_every_interval(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    clock = [100.0]
    census = Census(engine, every=5.0, clock=lambda: clock[0])

    assert await census.maybe_run()
    await session_since(seed, S.RUNNING, 1)
    clock[0] = 104.9
    assert not await census.maybe_run()
    assert sessions(S.RUNNING) == 0, "not recounted before the interval"
    clock[0] = 105.0
    assert await census.maybe_run()
    assert sessions(S.RUNNING) == 1
