"""What the API answers when something behind it fails: 500 without a trace, 503 health, logs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import select, update

from sokovan.common.rpc import LogsRequest, check_signature
from sokovan.db.models import Kernel
from sokovan.manager.api import create_app
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api, add_agent
from tests.api.test_auth_and_errors import assert_problem
from tests.support import signed_answer


async def test_unexpected_exception_is_a_generic_500(ctx: ManagerContext, api: Api) -> None:
    async def boom(request: web.Request) -> web.Response:
        raise RuntimeError("secret internals")

    app = create_app(ctx)
    app.router.add_get("/v2/boom", boom)
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/v2/boom", headers=api.alice)
        body = await assert_problem(resp, 500)
    assert "secret internals" not in str(body)


async def test_healthz_503_names_the_failed_check(ctx: ManagerContext) -> None:
    broken = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    app = create_app(ManagerContext(ctx.settings, ctx.engine, broken, ctx.etcd, ctx.hints, ctx.rpc))
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/healthz")
        assert resp.status == 503
        body = await resp.json()
    await broken.aclose()
    assert body["status"] == "unavailable"
    assert body["checks"]["postgres"] == "ok" and body["checks"]["etcd"] == "ok"
    assert body["checks"]["redis"] != "ok"


@pytest.fixture
async def fake_agent(ctx: ManagerContext) -> AsyncIterator[str]:
    """A signed-RPC endpoint answering `logs` the way an agent does."""
    secret = ctx.settings.cluster_secret or "secret"

    async def logs(request: web.Request) -> web.Response:
        body = await request.read()
        if not check_signature(secret, body, request.headers, http_method=request.method, path=request.path):
            return web.Response(status=401)
        req = LogsRequest.model_validate_json(body)
        answer = {"kernel_id": req.kernel_id, "stdout": "hello\n", "stderr": "warn\n"}
        return signed_answer(secret, request, answer)

    app = web.Application()
    app.router.add_post("/rpc/logs", logs)
    server = TestServer(app)
    await server.start_server()
    yield f"{server.host}:{server.port}"
    await server.close()


async def test_logs_from_a_reachable_agent(api: Api, fake_agent: str) -> None:
    await add_agent(api.engine, "agent-logs", rpc_addr=fake_agent)
    sid = (await (await api.create(api.alice)).json())["id"]
    async with api.engine.begin() as conn:
        await conn.execute(update(Kernel).where(Kernel.session_id == sid).values(agent_id="agent-logs"))
        kernel_id = (await conn.execute(select(Kernel.id).where(Kernel.session_id == sid))).scalar_one()
    resp = await api.client.get(f"/v2/sessions/{sid}/logs", headers=api.alice)
    assert resp.status == 200
    assert await resp.json() == {
        "items": [{"kernel_id": str(kernel_id), "stdout": "hello\n", "stderr": "warn\n"}]
    }
