"""`GET /healthz` exactly as contract section 8 has it, and 503 (never 500) for a request whose
service is away; the rule that tells an outage from a bug, and the backoff, as tables."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import aetcd
import asyncpg
import pytest
import redis.asyncio as aioredis
import redis.exceptions as redis_errors
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import exc as sa_errors

from sokovan.common.outages import is_outage
from sokovan.common.supervise import Backoff, Fatal, TaskFailed, supervise
from sokovan.db.engine import make_engine
from sokovan.harness import free_port
from sokovan.manager.api import create_app
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api

EXACT_KEYS = {"status", "checks"}


async def _health(client: TestClient) -> tuple[int, dict[str, object]]:  # type: ignore[type-arg]
    resp = await client.get("/healthz")
    return resp.status, await resp.json()


async def test_all_services_ok(api: Api) -> None:
    status, body = await _health(api.client)
    assert (status, body) == (
        200,
        {"status": "ok", "checks": {"postgres": "ok", "redis": "ok", "etcd": "ok"}},
    )


@pytest.fixture
async def away(ctx: ManagerContext) -> AsyncIterator[dict[str, ManagerContext]]:
    """Contexts with one service at an address where nothing listens (a service that is down)."""
    port = free_port()
    db_url = ctx.settings.db_url.replace(ctx.settings.db_url.split("@")[1].split("/")[0], f"127.0.0.1:{port}")
    engine = make_engine(db_url, pool_size=1)
    redis = aioredis.Redis.from_url(f"redis://127.0.0.1:{port}/0", socket_connect_timeout=1)
    etcd = aetcd.Client(host="127.0.0.1", port=port, timeout=1, connect_wait_timeout=1)
    yield {
        "postgres": dataclasses.replace(ctx, engine=engine),
        "redis": dataclasses.replace(ctx, redis=redis),
        "etcd": dataclasses.replace(ctx, etcd=etcd),
    }
    await engine.dispose()
    await redis.aclose()
    await etcd.close()


@pytest.mark.parametrize("service", ["postgres", "redis", "etcd"])
async def test_a_service_down_is_fail_and_503_without_error_text(
    api: Api, away: dict[str, ManagerContext], service: str
) -> None:
    client = TestClient(TestServer(create_app(away[service])))
    await client.start_server()
    try:
        status, body = await _health(client)
    finally:
        await client.close()
    checks = {name: ("fail" if name == service else "ok") for name in ("postgres", "redis", "etcd")}
    assert (status, body) == (503, {"status": "unavailable", "checks": checks})


async def test_a_request_whose_database_is_away_is_503(api: Api, away: dict[str, ManagerContext]) -> None:
    client = TestClient(TestServer(create_app(away["postgres"])))
    await client.start_server()
    try:
        resp = await client.post(
            "/v2/sessions", json={"image": "python:3", "command": "true"}, headers=api.alice
        )
        body = await resp.json(content_type=None)
    finally:
        await client.close()
    assert resp.status == 503, body
    assert resp.headers["Content-Type"].startswith("application/problem+json")
    assert int(resp.headers["Retry-After"]) > 0
    assert body["status"] == 503 and "127.0.0.1" not in body["detail"]


def _raised_from(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer from exc
    except BaseException as exc:
        return exc


@pytest.mark.parametrize(
    ("name", "error", "outage"),
    [
        ("refused", ConnectionRefusedError(), True),
        ("reset", ConnectionResetError(), True),
        ("timeout", TimeoutError(), True),
        ("redis connection", redis_errors.ConnectionError("lost"), True),
        ("redis pool exhausted", redis_errors.MaxConnectionsError(), True),
        ("redis timeout", redis_errors.TimeoutError(), True),
        ("redis wrong type", redis_errors.ResponseError("WRONGTYPE"), False),
        ("asyncpg connection", asyncpg.exceptions.ConnectionDoesNotExistError(), True),
        ("asyncpg shutting down", asyncpg.exceptions.CannotConnectNowError(), True),
        ("asyncpg missing table", asyncpg.exceptions.UndefinedTableError(), False),
        ("etcd", aetcd.exceptions.ConnectionFailedError(), True),
        (
            "sqlalchemy invalidated",
            sa_errors.DBAPIError("SELECT 1", None, Exception("x"), connection_invalidated=True),
            True,
        ),
        (
            "sqlalchemy wrapping a reset",
            _raised_from(
                sa_errors.OperationalError("SELECT 1", None, Exception("x")), ConnectionResetError()
            ),
            True,
        ),
        (
            "sqlalchemy integrity",
            sa_errors.IntegrityError("INSERT", None, Exception("duplicate key")),
            False,
        ),
        ("file missing", FileNotFoundError(), False),
        ("bug", KeyError("x"), False),
        ("cancelled", asyncio.CancelledError(), False),
    ],
)
def test_is_outage(name: str, error: BaseException, outage: bool) -> None:
    assert is_outage(error) is outage, name


def test_backoff_doubles_to_the_cap_with_jitter_and_resets() -> None:
    backoff = Backoff(first=0.1, cap=5.0)
    delays = [backoff.next_delay() for _ in range(10)]
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0, 5.0]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True)), delays
    backoff.reset()
    assert 0.05 <= backoff.next_delay() <= 0.1


async def test_supervise_restarts_outages_and_gives_up_on_bugs() -> None:
    stop = asyncio.Event()
    runs: list[str] = []

    async def flaky(stop: asyncio.Event) -> None:
        runs.append("run")
        if len(runs) < 4:
            raise ConnectionResetError("away")
        stop.set()

    await supervise("flaky", flaky, stop, backoff=Backoff(first=0.001, cap=0.001))
    assert runs == ["run"] * 4

    async def buggy(stop: asyncio.Event) -> None:
        raise KeyError("bug")

    with pytest.raises(TaskFailed, match="buggy failed 3 times in a row: KeyError"):
        await supervise("buggy", buggy, asyncio.Event(), fault_limit=3, backoff=Backoff(0.001, 0.001))

    async def fatal(stop: asyncio.Event) -> None:
        raise Fatal("bad setting")

    with pytest.raises(TaskFailed, match="fatal: Fatal: bad setting"):
        await supervise("fatal", fatal, asyncio.Event())

    async def returns(stop: asyncio.Event) -> None:
        return None

    with pytest.raises(TaskFailed, match="ended although"):
        await supervise("returns", returns, asyncio.Event())
