"""POST /v2/deployments: what is written for every type, the dry run, and that a refused request
writes nothing."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from sqlalchemy import insert, select

from sokovan.bus.hints import Hint, hint_channel
from sokovan.common.types import EndpointLifecycle
from sokovan.db.models import AuditLog, Deployment, DeploymentHistory, ScalingGroup
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api
from tests.api.deployment_helpers import (
    add_model_agent,
    counts,
    create,
    created,
    set_status,
)
from tests.api.tenancy_helpers import place_kernels
from tests.api.test_auth_and_errors import assert_problem

COMMANDS = {
    "custom": (
        {"image": "python:3", "command": "python3 -m http.server $PORT"},
        "python:3",
        "python3 -m http.server $PORT",
    ),
    "vllm": (
        {"model": "facebook/opt-125m"},
        "vllm",
        "vllm serve facebook/opt-125m --host 0.0.0.0 --port $PORT",
    ),
    "tgi": ({"model": "org/m x"}, "tgi", "text-generation-launcher --model-id 'org/m x' --port $PORT"),
    "sglang": (
        {"model": "Qwen/Qwen2-0.5B"},
        "sglang",
        "python -m sglang.launch_server --model-path Qwen/Qwen2-0.5B --host 0.0.0.0 --port $PORT",
    ),
}


def _body(kind: str, **extra: Any) -> dict[str, Any]:
    fields, _, _ = COMMANDS[kind]
    return {"name": f"d-{kind}", "type": kind, "replicas": 2, **fields, **extra}


@pytest.mark.parametrize("kind", sorted(COMMANDS))
async def test_create_every_type(api: Api, kind: str) -> None:
    await add_model_agent(api)
    resp = await api.client.post(
        "/v2/deployments",
        json=_body(kind, resources={"cpu": 2, "mem": "1g"}, environ={"A": "1"}),
        headers=api.alice,
    )
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    _, image, command = COMMANDS[kind]
    assert (body["name"], body["type"], body["owner"], body["status"]) == (
        f"d-{kind}",
        kind,
        "alice",
        "PENDING",
    )
    assert (body["replicas"], body["ready_replicas"], body["scaling_group"]) == (2, 0, "default")
    assert body["definition"] == {
        "image": image,
        "command": command,
        "environ": {"A": "1"},
        "resources": {"cpu": "2", "mem": str(2**30)},
        "health_check": body["health_check"],
    }
    assert body["health_check"]["path"] == "/health"
    assert body["endpoint"] is None  # no proxy registered
    assert body["status_info"] == {}
    assert body["created_at"].endswith("Z")
    did = uuid.UUID(body["id"])
    async with api.engine.connect() as conn:
        row = (await conn.execute(select(*Deployment.__table__.c).where(Deployment.id == did))).one()
        assert (row.status, row.replicas, row.definition["command"]) == ("PENDING", 2, command)
        history = (
            await conn.execute(
                select(
                    DeploymentHistory.handler,
                    DeploymentHistory.result,
                    DeploymentHistory.from_status,
                    DeploymentHistory.to_status,
                ).where(DeploymentHistory.deployment_id == did)
            )
        ).all()
        assert [tuple(h) for h in history] == [("api.create", "SUCCESS", None, "PENDING")]
        audit = (await conn.execute(select(AuditLog.action, AuditLog.target))).all()
        assert ("deployment.create", str(did)) in audit


async def test_create_hints_the_deployment_coordinator(api: Api, ctx: ManagerContext) -> None:
    pubsub = ctx.redis.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(hint_channel(ctx.settings.etcd_prefix))
    try:
        await created(api, api.alice)
        got = None
        for _ in range(50):
            message = await pubsub.get_message(timeout=0.1)
            if message is not None:
                got = message["data"]
                break
        assert got in (Hint.DEPLOYMENT.value, Hint.DEPLOYMENT.value.encode())
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("kind", sorted(COMMANDS))
async def test_dry_run_every_type_writes_nothing(api: Api, kind: str) -> None:
    await add_model_agent(api)
    before = await counts(api)
    resp = await api.client.post(
        "/v2/deployments", params={"dry_run": "true"}, json=_body(kind), headers=api.alice
    )
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    _, image, command = COMMANDS[kind]
    assert set(body) == {"definition", "placeable", "pending_reason"}
    assert (body["placeable"], body["pending_reason"]) == (True, None)
    assert body["definition"]["image"] == image and body["definition"]["command"] == command
    assert set(body["definition"]) == {"image", "command", "environ", "resources", "health_check"}
    assert body["definition"]["health_check"]["interval"] == 5.0
    assert await counts(api) == before


async def test_dry_run_answers_what_create_would_refuse_as_not_placeable(api: Api) -> None:
    before = await counts(api)
    resp = await api.client.post(
        "/v2/deployments", params={"dry_run": "true"}, json=_body("vllm"), headers=api.alice
    )
    assert resp.status == 200, await resp.text()  # no agent offers the vllm image (yet)
    body = await resp.json()
    assert body["placeable"] is False and "vllm" in body["pending_reason"]
    assert body["definition"]["image"] == "vllm"
    resp = await api.client.post(
        "/v2/deployments",
        params={"dry_run": "true"},
        json=_body("custom", resources={"cpu": 64}),
        headers=api.alice,
    )
    body = await resp.json()
    assert resp.status == 200 and body["placeable"] is False and "cpu" in body["pending_reason"]
    # a malformed request is still refused
    for bad in ({"type": "vllm", "name": "x"}, {**_body("custom"), "replicas": -1}):
        await assert_problem(
            await api.client.post("/v2/deployments", params={"dry_run": "true"}, json=bad, headers=api.alice),
            422,
        )
    assert await counts(api) == before
    assert (await create(api, api.alice, type="vllm", model="m", image=None, command=None)).status == 422


async def test_dry_run_reports_no_room_now(api: Api) -> None:
    for agent in ("agent-1", "agent-2"):  # every agent is full for now
        session = await (await api.create(api.bob, resources={"cpu": 4})).json()
        await place_kernels(api.engine, session["id"], agent)
    resp = await api.client.post(
        "/v2/deployments", params={"dry_run": "true"}, json=_body("custom"), headers=api.alice
    )
    body = await resp.json()
    assert resp.status == 200 and body["placeable"] is False and body["pending_reason"], body


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"type": "kserve"}, 422, "type"),
        ({"type": "vllm", "image": None, "command": None}, 422, "model"),
        ({"command": None}, 422, "command"),
        ({"image": None}, 422, "image"),
        (
            {"type": "vllm", "model": "m", "image": None, "command": None},
            422,
            "image 'vllm'",
        ),  # nobody offers it
        ({"name": "Bad_Name"}, 422, "name"),
        ({"name": ""}, 422, "name"),
        ({"replicas": -1}, 422, "replicas"),
        ({"replicas": 100000}, 422, "replicas"),
        ({"resources": {"cpu": 64}}, 422, "insufficient cpu"),
        ({"resources": {"cpu": "x"}}, 422, "resources"),
        ({"image": "nosuch:1"}, 422, "nosuch:1"),
        ({"scaling_group": "nope"}, 422, "nope"),
        ({"health_check": {"interval": 0}}, 422, "health_check"),
        ({"unknown_field": 1}, 422, "unknown_field"),
    ],
)
async def test_bad_requests_write_nothing(api: Api, body: dict[str, Any], status: int, needle: str) -> None:
    before = await counts(api)
    problem = await assert_problem(await create(api, api.alice, **body), status)
    assert needle in str(problem), problem
    assert await counts(api) == before


async def test_malformed_body(api: Api) -> None:
    resp = await api.client.post(
        "/v2/deployments", data=b"{nope", headers={**api.alice, "Content-Type": "application/json"}
    )
    await assert_problem(resp, 400)
    await assert_problem(await api.client.post("/v2/deployments", json=[1], headers=api.alice), 422)


async def test_scaling_group_must_allow_inference(api: Api) -> None:
    async with api.engine.begin() as conn:
        await conn.execute(insert(ScalingGroup).values(name="batch-only", allowed_session_types=["batch"]))
    before = await counts(api)
    problem = await assert_problem(await create(api, api.alice, scaling_group="batch-only"), 422)
    assert "inference" in str(problem["detail"])
    assert await counts(api) == before


async def test_quota_below_one_replica_is_refused(api: Api) -> None:
    admin_put = await api.client.put(
        "/v2/resource-policies/tiny", json={"total_resource_slots": {"cpu": "0.5"}}, headers=api.admin
    )
    assert admin_put.status in (200, 201), await admin_put.text()
    resp = await api.client.post(
        "/v2/keypairs",
        json={"user": "carol", "project": "default", "resource_policy": "tiny"},
        headers=api.admin,
    )
    carol = {"Authorization": f"Bearer {(await resp.json())['token']}"}
    before = await counts(api)
    problem = await assert_problem(await create(api, carol), 422)
    assert "cpu" in str(problem["detail"])
    assert await counts(api) == before


async def test_duplicate_live_name_is_409_until_destroyed(api: Api) -> None:
    first = await created(api, api.alice, name="svc")
    before = await counts(api)
    # another user cannot take it either: names are cluster-wide (the proxy serves /<name>/)
    for headers in (api.alice, api.bob):
        problem = await assert_problem(await create(api, headers, name="svc"), 409)
        assert "svc" in str(problem["detail"])
    problem = await assert_problem(
        await api.client.post(
            "/v2/deployments",
            params={"dry_run": "1"},
            json={**_body("custom"), "name": "svc"},
            headers=api.bob,
        ),
        409,
    )
    assert await counts(api) == before
    await set_status(api, first["id"], EndpointLifecycle.DESTROYING)
    await assert_problem(await create(api, api.bob, name="svc"), 409)
    await set_status(api, first["id"], EndpointLifecycle.DESTROYED)
    again = await created(api, api.bob, name="svc")
    assert again["id"] != first["id"] and again["owner"] == "bob"


async def test_concurrent_creates_of_one_name_make_one(api: Api) -> None:
    results = await asyncio.gather(*(create(api, api.alice, name="race") for _ in range(6)))
    statuses = sorted(r.status for r in results)
    assert statuses == [201] + [409] * 5, statuses
    assert (await counts(api))[0] == 1


async def test_zero_replicas_and_defaults(api: Api) -> None:
    body = await created(api, api.alice, replicas=0)
    assert body["replicas"] == 0
    body = await created(api, api.alice, name="dflt")
    assert body["replicas"] == 1
    assert body["definition"]["resources"] == {"cpu": "1", "mem": str(256 * 2**20)}
