"""Retention against real PostgreSQL and etcd: old terminal sessions go with their kernels and
history in bounded batches; new, live and still-needed ones stay; the audit log stays; the
retention is read live from etcd, fractions allowed."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from collections import Counter

import aetcd
from prometheus_client import REGISTRY
from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.settings import Settings
from sokovan.common.types import EndpointLifecycle, KernelStatus, RouteStatus, SessionStatus
from sokovan.config.cluster import ClusterConfig, EtcdConfigWatcher
from sokovan.db.models import (
    AuditLog,
    Deployment,
    DeploymentHistory,
    DeploymentRevision,
    Kernel,
    KernelSchedulingHistory,
    Route,
    RouteHistory,
    Session,
    SessionDependency,
    SessionSchedulingHistory,
)
from sokovan.orchestrator.maintenance.retention import Retention
from tests.orchestrator.bulk_seed import bulk_sessions
from tests.orchestrator.db_seed import Seed, read_column

DAY = 86400.0
ENDED = SessionStatus.TERMINATED


async def rows(engine: AsyncEngine, table: type) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(table)) or 0)


async def names(engine: AsyncEngine) -> set[str]:
    return set(await read_column(engine, select(Session.name)))


def removed_total(kind: str) -> float:
    return REGISTRY.get_sample_value("sokovan_retention_removed_total", {"kind": kind}) or 0.0


async def named(seed: Seed, name: str, **values: object) -> uuid.UUID:
    """A session (`Seed.session`'s arguments) called `name`."""
    sid = await seed.session(**values)  # type: ignore[arg-type]
    async with seed.engine.begin() as conn:
        await conn.execute(update(Session).where(Session.id == sid).values(name=name))
    return sid


async def ended_session(seed: Seed, name: str, days_ago: float, **extra: object) -> uuid.UUID:
    now = dt.datetime.now(dt.UTC)
    return await named(
        seed,
        name,
        status=ENDED,
        terminated_at=now - dt.timedelta(days=days_ago),
        created_at=now - dt.timedelta(days=days_ago + 1),
        **extra,
    )


async def test_old_terminal_sessions_go_in_batches_with_kernels_and_history(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    common = {"access_key": "AK1", "user_id": seed.user_id, "project_id": seed.project_id, "history": True}
    await bulk_sessions(engine, 1200, tag="old", status=ENDED, age=41 * DAY, ended_age=40 * DAY, **common)
    await bulk_sessions(
        engine,
        30,
        tag="cancelled",
        status=SessionStatus.CANCELLED,
        age=41 * DAY,
        ended_age=31 * DAY,
        **common,
    )
    await bulk_sessions(engine, 50, tag="recent", status=ENDED, age=2 * DAY, ended_age=DAY, **common)
    # Created long ago but never ended: no terminated_at, whatever their age.
    await bulk_sessions(
        engine, 20, tag="live", status=SessionStatus.RUNNING, kernel_status=KernelStatus.RUNNING,
        age=90 * DAY, **common,
    )  # fmt: skip
    async with engine.begin() as conn:
        await conn.execute(
            insert(AuditLog), [{"action": "session.create", "target": str(i)} for i in range(40)]
        )
    before = {
        kind: removed_total(kind) for kind in ("session", "kernel", "session_history", "kernel_history")
    }

    retention = Retention(engine, lambda: 30.0, batch=500, max_batches=2)
    first, more = await retention.run()
    assert (first["session"], more) == (1000, True)  # two batches of 500, then the run stops
    second, more = await retention.run()
    assert (second["session"], more) == (230, False)
    total = first + second
    assert total == Counter(
        {
            "session": 1230,
            "kernel": 1230,
            "session_history": 1230,
            "kernel_history": 1230,
            "parent_link": 0,
            "dependency": 0,
            "route": 0,
        }
    )
    assert {n.split("-")[0] for n in await names(engine)} == {"recent", "live"}
    assert await rows(engine, Session) == 70
    assert await rows(engine, Kernel) == 70
    assert await rows(engine, SessionSchedulingHistory) == 70
    assert await rows(engine, KernelSchedulingHistory) == 70
    assert await rows(engine, AuditLog) == 40  # the audit log is kept
    for kind, was in before.items():
        assert removed_total(kind) - was == 1230
    nothing, more = await retention.run()
    assert (nothing["session"], more) == (0, False)


async def test_what_is_still_needed_stays(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    # A retry chain whose live end still runs: the ended parent stays (the chain stays readable).
    parent = await ended_session(seed, "parent-of-live", 40)
    await named(seed, "live-child", status=SessionStatus.RUNNING, agent_id="a1", parent_session_id=parent)
    # A chain ended long ago entirely: both go, whatever the batch boundaries.
    grand = await ended_session(seed, "chain-1", 60)
    mid = await ended_session(seed, "chain-2", 50, parent_session_id=grand)
    await ended_session(seed, "chain-3", 45, parent_session_id=mid)
    # The dependency of a session still waiting stays; that of an ended one goes.
    needed = await ended_session(seed, "dep-of-pending", 40)
    waiting = await named(seed, "waiting")
    unneeded = await ended_session(seed, "dep-of-ended", 40)
    ended_waiter = await ended_session(seed, "ended-waiter", 40)
    # A replica whose route is still live stays; one whose route ended goes, with its route.
    deployment = await seed.deployment(EndpointLifecycle.READY)
    replica_live = await ended_session(seed, "replica-live-route", 40)
    replica_done = await ended_session(seed, "replica-ended-route", 40)
    # A retry the engine scheduled and has not created yet.
    await ended_session(
        seed,
        "retry-due",
        40,
        status_info={"retry": {"decision": "scheduled", "due_at": "2030-01-01T00:00:00+00:00"}},
    )
    async with engine.begin() as conn:
        await conn.execute(
            insert(SessionDependency),
            [
                {"session_id": waiting, "depends_on": needed},
                {"session_id": ended_waiter, "depends_on": unneeded},
            ],
        )
        await conn.execute(
            insert(Route),
            [
                {
                    "deployment_id": deployment,
                    "session_id": replica_live,
                    "status": RouteStatus.HEALTHY.value,
                },
                {
                    "deployment_id": deployment,
                    "session_id": replica_done,
                    "status": RouteStatus.TERMINATED.value,
                },
            ],
        )
    removed, _ = await Retention(engine, lambda: 30.0, batch=1).run()
    assert await names(engine) == {
        "parent-of-live",
        "live-child",
        "dep-of-pending",
        "waiting",
        "replica-live-route",
        "retry-due",
    }
    assert (removed["session"], removed["route"], removed["dependency"]) == (6, 1, 1)
    # The scheduled retry's child was created: now it may go (the child is what matters).
    async with engine.begin() as conn:
        await conn.execute(
            update(Session)
            .where(Session.name == "retry-due")
            .values(status_info={"retry": {"decision": "scheduled", "child": str(uuid.uuid4())}})
        )
    await Retention(engine, lambda: 30.0).run()
    assert "retry-due" not in await names(engine)


async def wait_for(predicate: object, seconds: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not predicate():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def test_the_retention_is_read_live_from_etcd_with_fractions(
    engine: AsyncEngine, etcd: aetcd.Client, settings: Settings
) -> None:
    seed = await Seed(engine).tenancy()
    for hours in (2, 5, 7, 13, 30 * 24 - 1, 30 * 24 + 1):
        await ended_session(seed, f"ended-{hours}h", hours / 24)
    config = ClusterConfig()
    watcher = EtcdConfigWatcher(etcd, settings.etcd_prefix, config)
    retention = Retention(engine, lambda: config.retention.retention_days)
    await watcher.load()
    await retention.run()  # the default: 30 days
    assert "ended-721h" not in await names(engine) and "ended-719h" in await names(engine)

    key = f"{settings.etcd_prefix}/config/manager/retention".encode()
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        await etcd.put(key, json.dumps({"retention_days": 0.5}).encode())
        await wait_for(lambda: config.retention.retention_days == 0.5)
        await retention.run()
        assert await names(engine) == {"ended-2h", "ended-5h", "ended-7h"}
        # Invalid values are ignored whole: the last valid one stays in force.
        for bad in ({"retention_days": 0}, {"retention_days": -1}, {"retention_days": "x"}, {"days": 1}):
            await etcd.put(key, json.dumps(bad).encode())
        await etcd.put(key, json.dumps({"retention_days": 0.25}).encode())
        await wait_for(lambda: config.retention.retention_days == 0.25)
        await retention.run()
        assert await names(engine) == {"ended-2h", "ended-5h"}
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_runs_are_spaced_unless_a_run_left_more_behind(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    for i in range(3):
        await ended_session(seed, f"old-{i}", 40)
    retention = Retention(engine, lambda: 30.0, every=3600, batch=1, max_batches=1)
    assert (await retention.maybe_run() or Counter())["session"] == 1  # left two behind: due again
    assert (await retention.maybe_run() or Counter())["session"] == 1
    # A full batch again: it cannot know that none is left, so it is due again at once.
    assert (await retention.maybe_run() or Counter())["session"] == 1
    assert (await retention.maybe_run() or Counter())["session"] == 0  # found nothing: spaced now
    await ended_session(seed, "old-3", 40)
    assert await retention.maybe_run() is None  # not due for an hour


async def test_old_destroyed_deployments_go_with_routes_history_and_revisions(engine: AsyncEngine) -> None:
    """A deployment DESTROYED before the cutoff goes (its environ may hold secrets), with its routes,
    their history, its revisions and its history; a recent or live one stays, and so does one a
    session still names (it goes once that session has gone)."""
    seed = await Seed(engine).tenancy()
    now = dt.datetime.now(dt.UTC)
    old = await seed.deployment(EndpointLifecycle.DESTROYED)
    named_by_session = await seed.deployment(EndpointLifecycle.DESTROYED)
    recent = await seed.deployment(EndpointLifecycle.DESTROYED)
    live = await seed.deployment(EndpointLifecycle.READY)
    recent_session = await ended_session(seed, "replica-recent", 1)
    async with engine.begin() as conn:
        for did, days in ((old, 40), (named_by_session, 40), (recent, 1), (live, 40)):
            await conn.execute(
                update(Deployment)
                .where(Deployment.id == did)
                .values(
                    destroyed_at=None if did == live else now - dt.timedelta(days=days),
                    created_at=now - dt.timedelta(days=days + 1),
                    definition={"image": "python:3", "environ": {"API_TOKEN": "s3cr3t"}},
                )
            )
            await conn.execute(
                insert(DeploymentRevision).values(
                    deployment_id=did, revision=1, definition={}, health_check={}
                )
            )
            await conn.execute(
                insert(DeploymentHistory).values(deployment_id=did, handler="h", result="success")
            )
            route = uuid.uuid4()
            await conn.execute(
                insert(Route).values(id=route, deployment_id=did, status=RouteStatus.TERMINATED.value)
            )
            await conn.execute(insert(RouteHistory).values(route_id=route, handler="h", result="success"))
        await conn.execute(
            update(Session).where(Session.id == recent_session).values(deployment_id=named_by_session)
        )
    removed, more = await Retention(engine, lambda: 30.0).run()
    assert (removed["deployment"], more) == (1, False)
    kept = set(await read_column(engine, select(Deployment.id)))
    assert kept == {named_by_session, recent, live}
    for table in (Route, DeploymentRevision, DeploymentHistory, RouteHistory):
        assert await rows(engine, table) == 3, table
