"""Fixtures over real PostgreSQL, Redis and etcd.

Each test run gets its own database (migrated once) and its own Redis/etcd key prefix;
each test starts from empty tables.
"""

from __future__ import annotations

import asyncio
import io
import os
import uuid
from collections.abc import AsyncIterator, Generator, Iterator

import aetcd
import pytest
import redis.asyncio as aioredis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from sokovan.common.settings import Settings
from sokovan.db import migrate
from sokovan.db.models import Base
from tests import connection_budget, services
from tests.support import scratch_redis

RUN_ID = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module", autouse=True)
def _connection_heavy_modules_one_at_a_time(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module marked `many_connections` runs while no other such module runs in another worker
    (tests/connection_budget.py says why)."""
    path = connection_budget.lock_path()
    if path is None or request.node.get_closest_marker(connection_budget.MARK) is None:
        yield
        return
    with connection_budget.held(path):
        yield


@pytest.fixture(scope="session")
def db_url() -> Iterator[str]:
    admin_url = services.admin_db_url()
    name = f"sokovan_test_{RUN_ID}"

    async def _exec(sql: str) -> None:
        engine = create_async_engine(admin_url, isolation_level="AUTOCOMMIT")
        async with engine.connect() as conn:
            await conn.execute(text(sql))
        await engine.dispose()

    asyncio.run(_exec(f'CREATE DATABASE "{name}"'))
    url = f"{admin_url.rpartition('/')[0]}/{name}"
    migrate.upgrade(url)
    yield url
    asyncio.run(_exec(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def settings(db_url: str) -> Settings:
    """Settings pointing at this run's database and key prefixes, for in-process and daemon tests."""
    return Settings(
        db_url=db_url,
        redis_url=services.redis_url(),
        etcd=services.etcd_addr(),
        etcd_prefix=f"sokovan-test-{RUN_ID}",
        cluster_secret=f"secret-{RUN_ID}",
    )


@pytest.fixture(scope="session")
def service_env(settings: Settings) -> dict[str, str]:
    """Environment for daemons started as subprocesses."""
    env = dict(os.environ)
    env.update(
        SOKOVAN_DB_URL=settings.db_url,
        SOKOVAN_REDIS_URL=settings.redis_url,
        SOKOVAN_ETCD=settings.etcd,
        SOKOVAN_ETCD_PREFIX=settings.etcd_prefix,
        SOKOVAN_CLUSTER_SECRET=settings.cluster_secret or "",
    )
    return env


@pytest.fixture
async def engine(settings: Settings) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(settings.db_url)
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    async with eng.begin() as conn:
        await conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    yield eng
    await eng.dispose()


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    async with scratch_redis(settings.redis_url, f"{settings.etcd_prefix}*") as client:
        yield client


@pytest.fixture
async def etcd(settings: Settings) -> AsyncIterator[aetcd.Client]:
    client = aetcd.Client(host=settings.etcd_host, port=settings.etcd_port)
    yield client
    await client.delete_prefix(f"{settings.etcd_prefix}/".encode())
    await client.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A test cut by pytest-timeout shows where its asyncio tasks were waiting: the main thread's
    stack alone says only that the loop was idle in `select`."""
    report = yield
    if report.failed and call.excinfo is not None and "Timeout (>" in str(call.excinfo.value):
        known: set[asyncio.Task[object]] = getattr(asyncio.tasks, "_all_tasks", set())
        pending = [t for t in list(known) if not t.done()]
        buffer = io.StringIO()
        for task in pending[:40]:
            buffer.write(f"--- {task.get_name()}\n")
            try:
                task.print_stack(limit=12, file=buffer)
            except Exception as exc:  # a frame without a line number: the report must still be made
                buffer.write(f"{task!r} (stack not printable: {exc!r})\n")
        report.sections.append((f"pending asyncio tasks ({len(pending)})", buffer.getvalue()))
    return report
