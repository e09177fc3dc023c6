"""Request bounds over the real API: each refused input is a 4xx problem and writes nothing, each
input at the bound is accepted, and no input is a 500."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from sqlalchemy import update

from sokovan.common.rpc import LogsRequest
from sokovan.db.models import Kernel
from sokovan.manager.api.session_logs import MAX_TAIL
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api, add_agent
from tests.api.test_auth_and_errors import assert_problem
from tests.support import signed_answer

KIB = 1024

REFUSED: list[tuple[str, dict[str, Any], int, str]] = [
    # (case, fields of the create body, status, a word the problem names)
    ("cpu-0", {"resources": {"cpu": 0}}, 422, "cpu must be more than 0"),
    ("mem-0", {"resources": {"mem": 0}}, 422, "mem must be more than 0"),
    ("cpu-0-mem-0", {"resources": {"cpu": 0, "mem": "0"}}, 422, "more than 0"),
    ("other-slot-0", {"resources": {"cuda.device": 0}}, 422, "more than 0"),
    ("cpu-1e30", {"resources": {"cpu": 1e30}}, 422, "at most"),
    ("cpu-10**30", {"resources": {"cpu": 10**30}}, 422, "at most"),
    ("mem-huge-units", {"resources": {"mem": "9" * 30 + "g"}}, 422, "at most"),
    ("cpu-tiny", {"resources": {"cpu": 1e-9}}, 422, "decimal places"),
    ("nul-in-command", {"command": "echo \x00"}, 400, "NUL"),
    ("nul-in-environ-value", {"environ": {"A": "\x00"}}, 400, "NUL"),
    ("nul-in-environ-name", {"environ": {"A\x00": "1"}}, 400, "NUL"),
    ("nul-in-name", {"name": "a\x00"}, 400, "NUL"),
    ("nul-in-image", {"image": "python:3\x00"}, 400, "NUL"),
    ("environ-too-many", {"environ": {f"V{i}": "1" for i in range(129)}}, 422, "at most 128"),
    ("environ-too-large", {"environ": {"A": "x" * 64 * KIB}}, 422, "65536"),
    ("environ-bad-name", {"environ": {"1BAD": "x"}}, 422, "must match"),
    ("environ-dash-name", {"environ": {"A-B": "x"}}, 422, "must match"),
    ("command-too-large", {"command": "x" * (64 * KIB + 1)}, 422, "65536"),
    ("command-too-large-utf8", {"command": "é" * (32 * KIB + 1)}, 422, "65536"),
    ("cluster-size-past-the-agents", {"cluster_size": 3, "resources": {"cpu": 0.1}}, 422, "cluster_size 3"),
    (
        "cluster-size-1024",
        {"cluster_size": 1024, "resources": {"cpu": 0.001, "mem": "1m"}},
        422,
        "agent count",
    ),
    ("priority-11-as-user", {"priority": 11}, 403, "only admins"),
    ("priority-100-as-user", {"priority": 100}, 403, "only admins"),
    ("priority-negative", {"priority": -1}, 422, "priority"),
    ("priority-huge", {"priority": 10**40}, 422, "priority"),
    ("cluster-size-huge", {"cluster_size": 10**40}, 422, "cluster_size"),
]


@pytest.mark.parametrize(("case", "patch", "status", "word"), REFUSED, ids=[r[0] for r in REFUSED])
@pytest.mark.parametrize("dry_run", [False, True], ids=["create", "dry-run"])
async def test_refused_session_inputs(
    api: Api, case: str, patch: dict[str, Any], status: int, word: str, dry_run: bool
) -> None:
    before = await api.counts()
    payload = {"image": "python:3", "type": "batch", "command": "echo hi", **patch}
    resp = await api.client.post(
        "/v2/sessions", json=payload, params={"dry_run": str(dry_run).lower()}, headers=api.alice
    )
    body = await assert_problem(resp, status)
    assert word in str(body["detail"])
    assert await api.counts() == before


ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("fractional-cpu", {"resources": {"cpu": 0.000001, "mem": "1m"}}),
    ("environ-128-names", {"environ": {f"V{i}": "1" for i in range(128)}}),
    ("environ-64k", {"environ": {"A": "x" * (64 * KIB - 1)}}),
    ("command-64k", {"command": "x" * 64 * KIB}),
    ("cluster-size-of-the-agents", {"cluster_size": 2, "cluster_mode": "multi-node"}),
    ("priority-10", {"priority": 10}),
    ("priority-0", {"priority": 0}),
]


@pytest.mark.parametrize(("case", "patch"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
async def test_inputs_at_the_bounds_are_accepted(api: Api, case: str, patch: dict[str, Any]) -> None:
    resp = await api.create(api.alice, **patch)
    assert resp.status == 201, await resp.text()


async def test_cluster_size_counts_agents_of_any_status(api: Api) -> None:
    """The bound is what the largest group has, not what is READY now: a session may wait."""
    await add_agent(api.engine, "agent-3", status="DOWN")
    resp = await api.create(api.alice, cluster_size=3, resources={"cpu": 1})
    assert resp.status == 201, await resp.text()


async def test_deployments_share_the_session_bounds(api: Api) -> None:
    before = await api.counts()
    base = {"name": "web", "type": "custom", "image": "python:3", "command": "serve", "replicas": 1}
    for patch, status in [
        ({"resources": {"cpu": 0}}, 422),
        ({"resources": {"mem": 1e30}}, 422),
        ({"environ": {"bad name": "x"}}, 422),
        ({"environ": {f"V{i}": "1" for i in range(129)}}, 422),
        ({"command": "x" * (64 * KIB + 1)}, 422),
        ({"command": "serve\x00"}, 400),
    ]:
        resp = await api.client.post("/v2/deployments", json={**base, **patch}, headers=api.alice)
        await assert_problem(resp, status)
    assert await api.counts() == before


RAW_BODIES: list[tuple[str, bytes]] = [
    ("nested-10000-arrays", b"[" * 10_000 + b"]" * 10_000),
    ("nested-10000-objects", b'{"a":' * 10_000 + b"1" + b"}" * 10_000),
    ("nested-inside-environ", b'{"image": "python:3", "environ": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
    ("nan", b'{"image": "python:3", "command": "x", "resources": {"cpu": NaN}}'),
    ("overflowing-float", b'{"image": "python:3", "command": "x", "resources": {"cpu": 1e999}}'),
    ("huge-integer", b'{"image": "python:3", "command": "x", "cluster_size": ' + b"9" * 5000 + b"}"),
    ("not-utf8", b'{"image": "\xff\xfe", "command": "x"}'),
    ("escaped-nul", b'{"image": "python:3", "command": "a\\u0000b"}'),
]


@pytest.mark.parametrize(("case", "raw"), RAW_BODIES, ids=[r[0] for r in RAW_BODIES])
async def test_bodies_json_cannot_carry_are_400(api: Api, case: str, raw: bytes) -> None:
    before = await api.counts()
    for path in ("/v2/sessions", "/v2/deployments"):
        resp = await api.client.post(
            path, data=raw, headers={**api.alice, "Content-Type": "application/json"}
        )
        await assert_problem(resp, 400)
    resp = await api.client.put("/v2/resource-policies/p", data=raw, headers=api.admin)
    await assert_problem(resp, 400)
    assert await api.counts() == before


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "image/png"])
async def test_any_content_type_is_read_as_json(api: Api, content_type: str) -> None:
    body = json.dumps({"image": "python:3", "command": "x", "resources": {"cpu": 0}}).encode()
    resp = await api.client.post(
        "/v2/sessions", data=body, headers={**api.alice, "Content-Type": content_type}
    )
    await assert_problem(resp, 422)


@pytest.mark.parametrize(
    "url",
    [
        "/v2/sessions?status=%00",
        "/v2/sessions?owner=a%00b",
        "/v2/sessions?%00=1",
        "/v2/sessions/%00",
        "/v2/agents/agent%00-1",
        "/v2/resource-policies/p%00",
        "/v2/nothing%00",
    ],
)
async def test_nul_in_path_or_query_is_400(api: Api, url: str) -> None:
    await assert_problem(await api.client.get(url, headers=api.admin), 400)


def cursor(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


ZERO = "00000000-0000-0000-0000-000000000000"
# Lists by creation time read {"t", "id"}; lists by one key read "id" (an integer or a string) or "name".
BAD_TIME_CURSORS: list[tuple[str, str]] = [
    ("year-99999", cursor({"t": "99999-01-01T00:00:00+00:00", "id": ZERO})),
    ("time-1e300", cursor({"t": 1e300, "id": ZERO})),
    ("past-year-9999-in-utc", cursor({"t": "9999-12-31T23:59:59-14:00", "id": ZERO})),
    ("before-year-1-in-utc", cursor({"t": "0001-01-01T00:00:00+14:00", "id": ZERO})),
    ("naive-time", cursor({"t": "2024-01-01T00:00:00", "id": ZERO})),
]
BAD_KEY_CURSORS: list[tuple[str, str]] = [
    ("key-past-bigint", cursor({"id": 2**64, "name": 2**64})),
    ("key-1e300", cursor({"id": 1e300, "name": 1e300})),
    ("key-true", cursor({"id": True, "name": True})),
    ("key-nul", cursor({"id": "a\x00", "name": "a\x00"})),
    ("deep", base64.urlsafe_b64encode(b"[" * 5000).decode()),
]


@pytest.mark.parametrize(
    ("case", "raw"),
    BAD_TIME_CURSORS + BAD_KEY_CURSORS,
    ids=[c[0] for c in BAD_TIME_CURSORS + BAD_KEY_CURSORS],
)
async def test_cursors_not_handed_out_are_400(api: Api, case: str, raw: str) -> None:
    sid = (await (await api.create(api.alice)).json())["id"]
    lists = ["/v2/sessions", "/v2/deployments"]
    if (case, raw) in BAD_KEY_CURSORS:
        lists += [
            f"/v2/sessions/{sid}/history",
            "/v2/agents",
            "/v2/agents/agent-1/history",
            "/v2/scaling-groups",
        ]
    for path in lists:
        resp = await api.client.get(path, params={"cursor": raw}, headers=api.admin)
        await assert_problem(resp, 400)


POLICIES: list[tuple[dict[str, Any], int]] = [
    ({"max_session_lifetime": 3600}, 200),
    ({"max_session_lifetime": 0}, 200),
    ({"max_session_lifetime": None}, 200),
    ({"max_session_lifetime": -1}, 422),
    ({"max_session_lifetime": 10**10}, 422),
    ({"max_session_lifetime": 1.5}, 422),
    ({"max_session_lifetime": "an hour"}, 422),
    ({"max_concurrent_sessions": 2**40}, 422),
    ({"max_pending_sessions": 2**63}, 422),
    ({"total_resource_slots": {"cpu": 1e30}}, 422),
]


@pytest.mark.parametrize(("body", "status"), POLICIES)
async def test_resource_policy_bounds(api: Api, body: dict[str, Any], status: int) -> None:
    resp = await api.client.put("/v2/resource-policies/p", json=body, headers=api.admin)
    assert resp.status == status, await resp.text()
    if status == 200:
        got = await resp.json()
        assert got["max_session_lifetime"] == body.get("max_session_lifetime")


async def test_scaling_group_pending_timeout_is_bounded(api: Api) -> None:
    resp = await api.client.post(
        "/v2/scaling-groups", json={"name": "g", "pending_timeout": 1e300}, headers=api.admin
    )
    await assert_problem(resp, 422)


@pytest.fixture
async def chatty_agent(ctx: ManagerContext) -> AsyncIterator[str]:
    """An RPC endpoint answering `logs` with 200 KiB per stream, more than the manager keeps."""
    secret = ctx.settings.cluster_secret or "secret"

    async def logs(request: web.Request) -> web.Response:
        req = LogsRequest.model_validate_json(await request.read())
        answer = {"kernel_id": req.kernel_id, "stdout": "o" * 200 * KIB + "END", "stderr": "e" * 200 * KIB}
        return signed_answer(secret, request, answer)

    app = web.Application(client_max_size=0)
    app.router.add_post("/rpc/logs", logs)
    server = TestServer(app)
    await server.start_server()
    yield f"{server.host}:{server.port}"
    await server.close()


async def test_logs_are_clipped_to_the_tail(ctx: ManagerContext, api: Api, chatty_agent: str) -> None:
    await add_agent(api.engine, "agent-chatty", rpc_addr=chatty_agent)
    sid = (await (await api.create(api.alice, cluster_size=2, cluster_mode="multi-node")).json())["id"]
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Kernel).where(Kernel.session_id == uuid.UUID(sid)).values(agent_id="agent-chatty")
        )
    resp = await api.client.get(f"/v2/sessions/{sid}/logs", params={"tail": "1000"}, headers=api.alice)
    assert resp.status == 200
    items = (await resp.json())["items"]
    assert len(items) == 2
    for item in items:
        assert len(item["stdout"]) == 1000 and item["stdout"].endswith("END")
        assert item["stderr"] == "e" * 1000
    resp = await api.client.get(f"/v2/sessions/{sid}/logs", headers=api.alice)
    assert all(len(i["stdout"]) == 64 * KIB for i in (await resp.json())["items"])


@pytest.mark.parametrize("tail", ["-1", str(MAX_TAIL + 1), "1e3", "lots", str(10**40)])
async def test_logs_tail_is_bounded(api: Api, tail: str) -> None:
    sid = (await (await api.create(api.alice)).json())["id"]
    resp = await api.client.get(f"/v2/sessions/{sid}/logs", params={"tail": tail}, headers=api.alice)
    await assert_problem(resp, 400)


async def test_a_500_names_a_reference_not_the_error(ctx: ManagerContext, api: Api) -> None:
    from aiohttp.test_utils import TestClient

    from sokovan.manager.api import create_app

    async def boom(request: web.Request) -> web.Response:
        raise OverflowError("date value out of range at /home/someone")

    app = create_app(ctx)
    app.router.add_get("/v2/boom", boom)
    async with TestClient(TestServer(app)) as client:
        body = await assert_problem(await client.get("/v2/boom", headers=api.alice), 500)
    assert "reference" in str(body["detail"])
    assert "someone" not in json.dumps(body) and "Overflow" not in json.dumps(body)
