"""`GET /v2/fair-share` (admin only; each level's usage, share and factor, in tree order), the
`fair_share_weight` of projects and domains (a positive finite number, else a 422 problem), and
`fair_share` as a scaling group's scheduler."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from typing import Any

import pytest
from sqlalchemy import insert, select, update

from sokovan.db.models import Domain, Project, Session, SessionSchedulingHistory
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api
from tests.api.tenancy_helpers import put
from tests.api.test_auth_and_errors import assert_problem

FAIR_SHARE = "/v2/fair-share"


async def _items(api: Api) -> list[dict[str, Any]]:
    resp = await api.client.get(FAIR_SHARE, headers=api.admin)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert set(body) == {"items"}
    return body["items"]  # type: ignore[no-any-return]


async def _ran_for_an_hour(api: Api, session_id: str) -> None:
    """The session RUNNING since an hour ago, as the scheduler would have left it."""
    sid = uuid.UUID(session_id)
    async with api.engine.begin() as conn:
        await conn.execute(update(Session).where(Session.id == sid).values(status="RUNNING"))
        await conn.execute(
            insert(SessionSchedulingHistory).values(
                session_id=sid,
                handler="promote_to_running",
                result="success",
                from_status="CREATING",
                to_status="RUNNING",
                created_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1),
            )
        )


async def test_admins_read_each_levels_usage_share_and_factor_and_users_are_refused(api: Api) -> None:
    await assert_problem(await api.client.get(FAIR_SHARE, headers=api.alice), 403)
    await assert_problem(await api.client.get(FAIR_SHARE), 401)
    assert await _items(api) == []  # nothing ran, nothing waits
    ran = await api.create(api.alice, resources={"cpu": 2, "mem": "1g"})
    assert ran.status == 201, await ran.text()
    await _ran_for_an_hour(api, (await ran.json())["id"])
    waits = await api.create(api.bob, resources={"cpu": 1, "mem": "1g"})
    assert waits.status == 201, await waits.text()
    items = await _items(api)
    assert [(i["level"], i["name"]) for i in items] == [
        ("domain", "default"),
        ("project", "default"),
        ("user", "alice"),
        ("user", "bob"),
    ]
    assert all(set(i) == {"level", "name", "path", "usage", "share", "factor"} for i in items)
    assert items[2]["path"] == ["default", "default", "alice"]
    alice, bob = items[2], items[3]
    assert alice["share"] == bob["share"] == 0.5  # users weigh 1 each; bob counts: he waits
    assert alice["usage"] > 0 and alice["factor"] < 1
    assert (bob["usage"], bob["factor"]) == (0.0, 1.0)
    assert items[0]["share"] == items[1]["share"] == 1.0


async def test_the_half_life_is_read_live_from_etcd(api: Api, ctx: ManagerContext) -> None:
    ran = await api.create(api.alice, resources={"cpu": 2, "mem": "1g"})
    await _ran_for_an_hour(api, (await ran.json())["id"])
    week = (await _items(api))[2]["usage"]
    key = f"{ctx.settings.etcd_prefix}/config/manager/fair_share".encode()
    await ctx.etcd.put(key, json.dumps({"half_life_hours": 0.5, "weights": {"cpu": 1}}).encode())
    try:
        for _ in range(100):  # the app's own watcher applies it
            usage = (await _items(api))[2]["usage"]
            if usage != week:
                break
            await asyncio.sleep(0.05)
        # an hour is two half-lives now: what decays is a larger part of a smaller window
        assert usage > week
    finally:
        await ctx.etcd.delete(key)


@pytest.mark.parametrize("path", ["/v2/domains/default", "/v2/projects/default?domain=default"])
async def test_fair_share_weight_is_set_shown_and_kept_when_left_out(api: Api, path: str) -> None:
    assert (await put(api, path, {}))["fair_share_weight"] == 1.0
    assert (await put(api, path, {"fair_share_weight": 2.5}))["fair_share_weight"] == 2.5
    assert (await put(api, path, {"total_resource_slots": {"cpu": 8}}))["fair_share_weight"] == 2.5
    assert (await put(api, path, {"fair_share_weight": 3}))["fair_share_weight"] == 3.0


BAD_WEIGHTS: list[Any] = [0, -1, 1e7, "2", None, True, [1]]


@pytest.mark.parametrize("weight", BAD_WEIGHTS, ids=[repr(w) for w in BAD_WEIGHTS])
async def test_a_weight_that_is_not_a_positive_finite_number_is_422(api: Api, weight: Any) -> None:
    for path in ("/v2/domains/default", "/v2/projects/default?domain=default"):
        resp = await api.client.put(path, json={"fair_share_weight": weight}, headers=api.admin)
        body = await assert_problem(resp, 422)
        assert "fair_share_weight" in str(body["detail"])
    raw = b'{"fair_share_weight": NaN}'
    resp = await api.client.put("/v2/domains/default", data=raw, headers=api.admin)
    await assert_problem(resp, 400)  # not JSON at all
    async with api.engine.connect() as conn:
        assert (await conn.execute(select(Domain.fair_share_weight))).scalars().all() == [1.0]
        assert (await conn.execute(select(Project.fair_share_weight))).scalars().all() == [1.0]


async def test_weights_are_admin_only(api: Api) -> None:
    resp = await api.client.put("/v2/domains/default", json={"fair_share_weight": 5}, headers=api.alice)
    await assert_problem(resp, 403)


async def test_fair_share_is_a_scheduler_of_scaling_groups(api: Api) -> None:
    resp = await api.client.post(
        "/v2/scaling-groups", json={"name": "shared", "scheduler": "fair_share"}, headers=api.admin
    )
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["scheduler"] == "fair_share"
    resp = await api.client.patch(
        "/v2/scaling-groups/default", json={"scheduler": "fair_share"}, headers=api.admin
    )
    assert resp.status == 200, await resp.text()
    resp = await api.client.get("/v2/openapi.json")
    assert "/v2/fair-share" in (await resp.json())["paths"]
