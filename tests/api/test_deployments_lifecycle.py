"""Reading, listing, scaling and destroying deployments; who may see what."""

from __future__ import annotations

import uuid

from sqlalchemy import func, select

from sokovan.bus.routing import register_proxy
from sokovan.common.types import EndpointLifecycle
from sokovan.db.models import DeploymentHistory
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api
from tests.api.deployment_helpers import add_replica_session, counts, created, set_status
from tests.api.test_auth_and_errors import assert_problem


def _path(deployment_id: str, tail: str = "") -> str:
    return f"/v2/deployments/{deployment_id}{tail}"


async def _history(api: Api, deployment_id: str) -> list[tuple[str, str, str | None, str | None]]:
    resp = await api.client.get(_path(deployment_id, "/history"), headers=api.alice)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["next_cursor"] is None
    return [(h["handler"], h["result"], h["from_status"], h["to_status"]) for h in body["items"]]


async def test_read_is_the_create_answer(api: Api) -> None:
    made = await created(api, api.alice)
    resp = await api.client.get(_path(made["id"]), headers=api.alice)
    assert resp.status == 200
    token = made.pop("token")  # shown once, at creation
    assert isinstance(token, str) and len(token) >= 32
    assert await resp.json() == made
    assert token not in await resp.text()


async def test_another_users_deployment_is_404_on_every_verb(api: Api) -> None:
    made = await created(api, api.alice)
    before = await counts(api)
    did = made["id"]
    for method, path, body in [
        ("GET", _path(did), None),
        ("PATCH", _path(did), {"replicas": 3}),
        ("DELETE", _path(did), None),
        ("GET", _path(did, "/routes"), None),
        ("GET", _path(did, "/history"), None),
        ("GET", _path(str(uuid.uuid4())), None),
        ("GET", _path("not-a-uuid"), None),
        ("DELETE", _path("not-a-uuid"), None),
    ]:
        resp = await api.client.request(method, path, json=body, headers=api.bob)
        await assert_problem(resp, 404)
    assert await counts(api) == before
    assert (await (await api.client.get(_path(did), headers=api.alice)).json())["status"] == "PENDING"


async def test_admin_sees_all_users_their_own(api: Api) -> None:
    mine = await created(api, api.alice, name="a1")
    theirs = await created(api, api.bob, name="b1")
    admin = await (await api.client.get("/v2/deployments", headers=api.admin)).json()
    assert {d["id"] for d in admin["items"]} == {mine["id"], theirs["id"]}
    assert admin["next_cursor"] is None
    alice = await (await api.client.get("/v2/deployments", headers=api.alice)).json()
    assert [d["id"] for d in alice["items"]] == [mine["id"]]
    only_bob = await (
        await api.client.get("/v2/deployments", params={"owner": "bob"}, headers=api.admin)
    ).json()
    assert [d["owner"] for d in only_bob["items"]] == ["bob"]
    await assert_problem(
        await api.client.get("/v2/deployments", params={"owner": "bob"}, headers=api.alice), 403
    )
    resp = await api.client.get(_path(theirs["id"]), headers=api.admin)
    assert resp.status == 200 and (await resp.json())["owner"] == "bob"
    # an admin acts on them too
    assert (
        await api.client.patch(_path(theirs["id"]), json={"replicas": 4}, headers=api.admin)
    ).status == 200
    assert (await api.client.delete(_path(theirs["id"]), headers=api.admin)).status == 202


async def test_list_pages_newest_first_and_filters(api: Api) -> None:
    ids = [(await created(api, api.alice, name=f"p{i}"))["id"] for i in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = await (await api.client.get("/v2/deployments", params=params, headers=api.alice)).json()
        assert len(page["items"]) <= 2
        seen += [d["id"] for d in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == ids[::-1]
    await set_status(api, ids[0], EndpointLifecycle.READY)
    ready = await (
        await api.client.get("/v2/deployments", params={"status": "ready"}, headers=api.alice)
    ).json()
    assert [d["id"] for d in ready["items"]] == [ids[0]]
    for params in (
        {"limit": "0"},
        {"limit": "501"},
        {"limit": "x"},
        {"cursor": "garbage"},
        {"status": "NOPE"},
    ):
        await assert_problem(await api.client.get("/v2/deployments", params=params, headers=api.alice), 400)


async def test_scale(api: Api) -> None:
    made = await created(api, api.alice, replicas=1)
    resp = await api.client.patch(_path(made["id"]), json={"replicas": 3}, headers=api.alice)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert (body["replicas"], body["status"]) == (3, "PENDING")
    # the same target again changes nothing
    assert (await api.client.patch(_path(made["id"]), json={"replicas": 3}, headers=api.alice)).status == 200
    assert await _history(api, made["id"]) == [
        ("api.create", "SUCCESS", None, "PENDING"),
        ("api.scale", "SUCCESS", "PENDING", "PENDING"),
    ]
    before = await counts(api)
    for bad in ({"replicas": -1}, {"replicas": 1001}, {"replicas": "2"}, {}, {"replicas": 2, "x": 1}):
        await assert_problem(await api.client.patch(_path(made["id"]), json=bad, headers=api.alice), 422)
    assert await counts(api) == before
    assert (await api.client.patch(_path(made["id"]), json={"replicas": 0}, headers=api.alice)).status == 200


async def test_destroy_is_idempotent_and_ends_scaling(api: Api) -> None:
    made = await created(api, api.alice)
    await set_status(api, made["id"], EndpointLifecycle.READY)
    resp = await api.client.delete(_path(made["id"]), headers=api.alice)
    assert resp.status == 202, await resp.text()
    body = await resp.json()
    assert body["status"] == "DESTROYING"
    assert body["status_changed_at"] >= made["status_changed_at"]
    again = await api.client.delete(_path(made["id"]), headers=api.alice)
    assert again.status == 202 and (await again.json())["status"] == "DESTROYING"
    assert await _history(api, made["id"]) == [
        ("api.create", "SUCCESS", None, "PENDING"),
        ("api.destroy", "SUCCESS", "READY", "DESTROYING"),
    ]
    before = await counts(api)
    problem = await assert_problem(
        await api.client.patch(_path(made["id"]), json={"replicas": 5}, headers=api.alice), 409
    )
    assert "DESTROYING" in str(problem["detail"])
    await set_status(api, made["id"], EndpointLifecycle.DESTROYED)
    gone = await api.client.delete(_path(made["id"]), headers=api.alice)
    assert gone.status == 202 and (await gone.json())["status"] == "DESTROYED"
    await assert_problem(
        await api.client.patch(_path(made["id"]), json={"replicas": 1}, headers=api.alice), 409
    )
    assert await counts(api) == before


async def test_history_pages(api: Api) -> None:
    made = await created(api, api.alice)
    for n in range(2, 6):
        assert (
            await api.client.patch(_path(made["id"]), json={"replicas": n}, headers=api.alice)
        ).status == 200
    async with api.engine.connect() as conn:
        total = (await conn.execute(select(func.count()).select_from(DeploymentHistory))).scalar_one()
    assert total == 5
    items: list[str] = []
    cursor = None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = await (
            await api.client.get(_path(made["id"], "/history"), params=params, headers=api.alice)
        ).json()
        items += [h["message"] for h in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert items == ["created with 1 replica(s)"] + [f"replicas {n - 1} -> {n}" for n in range(2, 6)]
    resp = await api.client.get(_path(made["id"], "/history"), params={"cursor": "x"}, headers=api.alice)
    await assert_problem(resp, 400)


async def test_pending_replica_reason_shows_on_the_deployment(api: Api) -> None:
    made = await created(api, api.alice, replicas=2)
    await add_replica_session(api, made["id"], "alice", "RUNNING", {})
    await add_replica_session(
        api, made["id"], "alice", "PENDING", {"pending_reason": "0/2 agents fit: 2 insufficient cpu"}
    )
    body = await (await api.client.get(_path(made["id"]), headers=api.alice)).json()
    assert body["status_info"]["pending_reason"] == "0/2 agents fit: 2 insufficient cpu"
    listed = await (await api.client.get("/v2/deployments", headers=api.alice)).json()
    assert listed["items"][0]["status_info"]["pending_reason"] == "0/2 agents fit: 2 insufficient cpu"


async def test_endpoint_when_a_proxy_registered(api: Api, ctx: ManagerContext) -> None:
    made = await created(api, api.alice, name="chat")
    assert made["endpoint"] is None
    secret = ctx.settings.cluster_secret or ""
    await register_proxy(ctx.redis, ctx.settings.etcd_prefix, secret, "p1", "http://127.0.0.1:8091")
    try:
        body = await (await api.client.get(_path(made["id"]), headers=api.alice)).json()
        assert body["endpoint"] == "http://127.0.0.1:8091/chat"
        # a registration not signed with the cluster secret is not believed
        await ctx.redis.hset(
            f"{ctx.settings.etcd_prefix}:routing:proxies", "evil", '{"body": "{}", "sig": "x"}'
        )
        body = await (await api.client.get(_path(made["id"]), headers=api.alice)).json()
        assert body["endpoint"] == "http://127.0.0.1:8091/chat"
    finally:
        await ctx.redis.delete(f"{ctx.settings.etcd_prefix}:routing:proxies")


async def test_openapi_lists_the_deployment_paths(api: Api) -> None:
    doc = await (await api.client.get("/v2/openapi.json")).json()
    paths = doc["paths"]
    assert set(paths["/v2/deployments"]) == {"get", "post"}
    assert set(paths["/v2/deployments/{id}"]) == {"get", "patch", "delete"}
    assert "get" in paths["/v2/deployments/{id}/routes"]
    assert "get" in paths["/v2/deployments/{id}/history"]
    assert "get" in paths["/v2/routes/{id}/history"]
    post = paths["/v2/deployments"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "DeploymentCreateRequest"
    )
    assert {"201", "200", "409", "422"} <= set(post["responses"])
    schemas = doc["components"]["schemas"]
    assert {"DeploymentOut", "RouteOut", "DeploymentList", "RouteList", "HandlerRunList"} <= set(schemas)
    assert {"ready_replicas", "endpoint", "definition", "health_check"} <= set(
        schemas["DeploymentOut"]["properties"]
    )
    params = {p["name"] for p in doc["paths"]["/v2/events"]["get"]["parameters"]}
    assert {"session_id", "deployment_id"} <= params
