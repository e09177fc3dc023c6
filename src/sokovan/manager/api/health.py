"""`GET /healthz`: PostgreSQL, Redis and etcd, each with a short timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from aiohttp import web
from sqlalchemy import text

from sokovan.manager.api.auth import CTX_KEY
from sokovan.manager.api.common import json_response
from sokovan.manager.api.openapi import Route
from sokovan.manager.api.schemas import HealthResponse
from sokovan.manager.context import ManagerContext

CHECK_TIMEOUT = 3.0


async def _postgres(ctx: ManagerContext) -> None:
    async with ctx.engine.connect() as conn:
        await conn.execute(text("SELECT 1"))


async def _redis(ctx: ManagerContext) -> None:
    await ctx.redis.ping()


async def _etcd(ctx: ManagerContext) -> None:
    await ctx.etcd.get(b"health-probe")


async def _check(probe: Awaitable[None]) -> str:
    try:
        await asyncio.wait_for(probe, CHECK_TIMEOUT)
    except TimeoutError:
        return f"timed out after {CHECK_TIMEOUT:g}s"
    except Exception as exc:
        return f"failed: {type(exc).__name__}: {exc}"[:300]
    return "ok"


async def healthz(request: web.Request) -> web.Response:
    ctx = request.app[CTX_KEY]
    names = ("postgres", "redis", "etcd")
    results = await asyncio.gather(_check(_postgres(ctx)), _check(_redis(ctx)), _check(_etcd(ctx)))
    checks = dict(zip(names, results, strict=True))
    ok = all(r == "ok" for r in results)
    return json_response(
        HealthResponse(status="ok" if ok else "unavailable", checks=checks), 200 if ok else 503
    )


ROUTES = [
    Route(
        "GET",
        "/healthz",
        healthz,
        "Liveness: PostgreSQL, Redis and etcd",
        {200: HealthResponse, 503: HealthResponse},
        auth=False,
    ),
]
