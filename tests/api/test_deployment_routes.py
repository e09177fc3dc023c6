"""A deployment's routes and their history, and its events on `GET /v2/events?deployment_id=`."""

from __future__ import annotations

import datetime as dt
import time
import uuid

from sokovan.bus.user_events import UserEvent, UserEventPublisher
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api, user_id
from tests.api.deployment_helpers import add_route, add_route_history, created
from tests.api.test_auth_and_errors import assert_problem
from tests.api.test_events import next_event, stream, wait_no_subscribers


async def test_routes_with_health_and_ready_replicas(api: Api) -> None:
    made = await created(api, api.alice, replicas=3)
    probed = time.time()
    healthy = await add_route(
        api,
        made["id"],
        "HEALTHY",
        endpoint="http://127.0.0.1:40001",
        health={
            "consecutive_successes": 4,
            "consecutive_failures": 0,
            "last_checked_at": probed,
            "last_status": "200",
        },
    )
    fresh = await add_route(api, made["id"], "PROVISIONING")
    await add_route(api, made["id"], "HEALTHY", endpoint="http://127.0.0.1:40002")
    await add_route(api, made["id"], "UNHEALTHY", health={"consecutive_failures": 3, "last_status": "503"})
    body = await (await api.client.get(f"/v2/deployments/{made['id']}", headers=api.alice)).json()
    assert (body["replicas"], body["ready_replicas"]) == (3, 2)
    resp = await api.client.get(f"/v2/deployments/{made['id']}/routes", headers=api.alice)
    assert resp.status == 200, await resp.text()
    page = await resp.json()
    assert page["next_cursor"] is None
    items = page["items"]
    assert [r["status"] for r in items] == ["HEALTHY", "PROVISIONING", "HEALTHY", "UNHEALTHY"]
    first = items[0]
    assert first["id"] == str(healthy) and first["endpoint"] == "http://127.0.0.1:40001"
    assert first["session_id"] is None
    assert first["health"]["consecutive_successes"] == 4 and first["health"]["last_status"] == "200"
    checked = dt.datetime.fromisoformat(first["health"]["last_checked_at"])
    assert abs(checked.timestamp() - probed) < 0.01
    assert items[1]["id"] == str(fresh)
    assert items[1]["health"] == {
        "consecutive_successes": 0,
        "consecutive_failures": 0,
        "last_checked_at": None,
        "last_status": None,
    }
    assert {"id", "session_id", "status", "endpoint", "health", "created_at"} <= first.keys()
    only = await (
        await api.client.get(
            f"/v2/deployments/{made['id']}/routes", params={"status": "unhealthy"}, headers=api.alice
        )
    ).json()
    assert [r["status"] for r in only["items"]] == ["UNHEALTHY"]
    paged = await (
        await api.client.get(f"/v2/deployments/{made['id']}/routes", params={"limit": "3"}, headers=api.alice)
    ).json()
    assert len(paged["items"]) == 3 and paged["next_cursor"]
    rest = await (
        await api.client.get(
            f"/v2/deployments/{made['id']}/routes", params={"cursor": paged["next_cursor"]}, headers=api.alice
        )
    ).json()
    assert [r["id"] for r in paged["items"] + rest["items"]] == [r["id"] for r in items]
    await assert_problem(
        await api.client.get(
            f"/v2/deployments/{made['id']}/routes", params={"status": "x"}, headers=api.alice
        ),
        400,
    )
    admin = await api.client.get(f"/v2/deployments/{made['id']}/routes", headers=api.admin)
    assert admin.status == 200 and len((await admin.json())["items"]) == 4


async def test_route_history(api: Api) -> None:
    made = await created(api, api.alice)
    route = await add_route(api, made["id"], "HEALTHY")
    await add_route_history(api, route, "HealthCheckRoute", "SUCCESS", "DEGRADED", "HEALTHY")
    await add_route_history(api, route, "HealthCheckRoute", "STALE", "HEALTHY", "DEGRADED")
    resp = await api.client.get(f"/v2/routes/{route}/history", headers=api.alice)
    assert resp.status == 200, await resp.text()
    items = (await resp.json())["items"]
    assert [(h["result"], h["from_status"], h["to_status"]) for h in items] == [
        ("SUCCESS", "DEGRADED", "HEALTHY"),
        ("STALE", "HEALTHY", "DEGRADED"),
    ]
    assert items[0]["handler"] == "HealthCheckRoute"
    assert (await api.client.get(f"/v2/routes/{route}/history", headers=api.admin)).status == 200
    for path in (
        f"/v2/routes/{route}/history",
        f"/v2/routes/{uuid.uuid4()}/history",
        "/v2/routes/zzz/history",
    ):
        await assert_problem(await api.client.get(path, headers=api.bob), 404)


async def test_deployment_events_reach_their_owner_and_filter(
    api: Api, ctx: ManagerContext, publisher: UserEventPublisher
) -> None:
    alice, bob = await user_id(api, "alice"), await user_id(api, "bob")
    mine, other = str(uuid.uuid4()), str(uuid.uuid4())
    route = str(uuid.uuid4())
    async with (
        stream(api, api.alice, deployment_id=mine) as filtered,
        stream(api, api.alice) as everything,
        stream(api, api.admin, deployment_id=mine) as admin,
    ):
        await publisher.publish_many(
            [
                UserEvent(
                    name="deployment.status",
                    deployment_id=other,
                    owner=alice,
                    **{"from": "PENDING", "to": "SCALING"},
                ),
                UserEvent(
                    name="deployment.status", deployment_id=mine, owner=bob, **{"from": "X", "to": "Y"}
                ),
                UserEvent(
                    name="session.status",
                    session_id=str(uuid.uuid4()),
                    owner=alice,
                    **{"from": "A", "to": "B"},
                ),
                UserEvent(
                    name="route.status",
                    deployment_id=mine,
                    route_id=route,
                    owner=alice,
                    **{"from": "PROVISIONING", "to": "DEGRADED"},
                ),
                UserEvent(
                    name="deployment.status",
                    deployment_id=mine,
                    owner=alice,
                    **{"from": "SCALING", "to": "READY"},
                ),
            ]
        )
        name, data = await next_event(filtered)
        assert (name, data["route_id"], data["to"]) == ("route.status", route, "DEGRADED")
        name, data = await next_event(filtered)
        assert (name, data["deployment_id"], data["to"]) == ("deployment.status", mine, "READY")
        got = [await next_event(everything) for _ in range(4)]
        assert [(n, d.get("deployment_id")) for n, d in got] == [
            ("deployment.status", other),
            ("session.status", None),
            ("route.status", mine),
            ("deployment.status", mine),
        ]
        got = [await next_event(admin) for _ in range(3)]
        assert [d["to"] for _, d in got] == ["Y", "DEGRADED", "READY"]
    await wait_no_subscribers(ctx)
    body = await assert_problem(
        await api.client.get("/v2/events", params={"deployment_id": "nope"}, headers=api.alice), 400
    )
    assert "deployment_id" in str(body["detail"])


async def test_destroy_publishes_a_deployment_event(api: Api, ctx: ManagerContext) -> None:
    made = await created(api, api.alice)
    alice = await user_id(api, "alice")
    async with stream(api, api.alice, deployment_id=made["id"]) as events:
        assert (await api.client.delete(f"/v2/deployments/{made['id']}", headers=api.alice)).status == 202
        name, data = await next_event(events)
    assert name == "deployment.status"
    assert (data["deployment_id"], data["from"], data["to"], data["owner"]) == (
        made["id"],
        "PENDING",
        "DESTROYING",
        alice,
    )
    await wait_no_subscribers(ctx)
