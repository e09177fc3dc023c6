"""`GET /healthz` (no authentication): PostgreSQL, Redis and etcd, each with a short timeout.

`{"status": "ok" | "unavailable", "checks": {"postgres", "redis", "etcd": "ok" | "fail"}}`, 200
when every check is ok and 503 otherwise. The answer never carries an error's text (it would tell
host and user names to anyone); what failed is logged instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from sqlalchemy import text

from sokovan.common.supervise import describe
from sokovan.manager.api.auth import CTX_KEY
from sokovan.manager.api.common import json_response
from sokovan.manager.api.openapi import Route
from sokovan.manager.api.schemas import HealthResponse
from sokovan.manager.context import ManagerContext

log = structlog.get_logger(__name__)

CHECK_TIMEOUT = 2.0
OK = "ok"
FAIL = "fail"


async def _postgres(ctx: ManagerContext) -> None:
    async with ctx.engine.connect() as conn:
        await conn.execute(text("SELECT 1"))


async def _redis(ctx: ManagerContext) -> None:
    await ctx.redis.ping()


async def _etcd(ctx: ManagerContext) -> None:
    await ctx.etcd.get(b"health-probe")


CHECKS: dict[str, Callable[[ManagerContext], Awaitable[None]]] = {
    "postgres": _postgres,
    "redis": _redis,
    "etcd": _etcd,
}


async def _check(name: str, probe: Awaitable[None]) -> str:
    try:
        await asyncio.wait_for(probe, CHECK_TIMEOUT)
    except Exception as exc:
        log.warning("healthz.check_failed", check=name, error=describe(exc))
        return FAIL
    return OK


async def healthz(request: web.Request) -> web.Response:
    ctx = request.app[CTX_KEY]
    results = await asyncio.gather(*(_check(name, probe(ctx)) for name, probe in CHECKS.items()))
    checks = dict(zip(CHECKS, results, strict=True))
    ok = all(r == OK for r in results)
    return json_response(
        HealthResponse(status="ok" if ok else "unavailable", checks=checks), 200 if ok else 503
    )


ROUTES = [
    Route(
        "GET",
        "/healthz",
        healthz,
        'Liveness: PostgreSQL, Redis and etcd, each "ok" or "fail" (never an error\'s text); 503 '
        "unless all are ok",
        {200: HealthResponse, 503: HealthResponse},
        auth=False,
    ),
]
