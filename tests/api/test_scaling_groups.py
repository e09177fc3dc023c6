"""POST/PATCH/GET /v2/scaling-groups."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from sokovan.db.models import ScalingGroup
from tests.api.conftest import Api, add_agent
from tests.api.tenancy_helpers import audit_actions
from tests.api.test_auth_and_errors import assert_problem

GPU = {
    "name": "gpu",
    "scheduler": "lifo",
    "agent_selection": "dispersed",
    "pending_timeout": 30,
    "allowed_session_types": ["batch", "inference"],
    "queue_policy": "block",
    "resource_priority": ["cuda.device", "mem", "cpu"],
}


async def test_create_read_list_patch(api: Api) -> None:
    resp = await api.client.post("/v2/scaling-groups", json=GPU, headers=api.admin)
    assert resp.status == 201, await resp.text()
    created = await resp.json()
    assert {k: created[k] for k in GPU} == {**GPU, "pending_timeout": 30.0}
    got = await api.client.get("/v2/scaling-groups/gpu", headers=api.alice)  # any user may read
    assert got.status == 200 and await got.json() == created

    resp = await api.client.patch(
        "/v2/scaling-groups/gpu",
        json={"scheduler": "drf", "agent_selection": "roundrobin"},
        headers=api.admin,
    )
    assert resp.status == 200, await resp.text()
    patched = await resp.json()
    assert (patched["scheduler"], patched["agent_selection"]) == ("drf", "roundrobin")
    assert patched["queue_policy"] == "block" and patched["pending_timeout"] == 30.0  # untouched

    page = await (await api.client.get("/v2/scaling-groups?limit=1", headers=api.alice)).json()
    assert [g["name"] for g in page["items"]] == ["default"]
    page2 = await (
        await api.client.get(f"/v2/scaling-groups?limit=1&cursor={page['next_cursor']}", headers=api.alice)
    ).json()
    assert [g["name"] for g in page2["items"]] == ["gpu"] and page2["next_cursor"] is None
    actions = await audit_actions(api.engine)
    assert ("scaling_group.create", "gpu") in actions and ("scaling_group.update", "gpu") in actions


async def test_defaults_on_create(api: Api) -> None:
    resp = await api.client.post("/v2/scaling-groups", json={"name": "plain"}, headers=api.admin)
    assert resp.status == 201
    body = await resp.json()
    assert (body["scheduler"], body["agent_selection"], body["queue_policy"]) == (
        "fifo",
        "concentrated",
        "backfill",
    )
    assert body["allowed_session_types"] == ["batch", "interactive", "inference"]
    assert body["resource_priority"] == ["cuda.device", "cpu", "mem"]


async def test_duplicate_name_is_409(api: Api) -> None:
    before = await api.counts()
    await assert_problem(
        await api.client.post("/v2/scaling-groups", json={"name": "default"}, headers=api.admin), 409
    )
    assert await api.counts() == before


BAD: list[tuple[str, dict[str, Any]]] = [
    ("unknown-scheduler", {"scheduler": "random"}),
    ("unknown-selector", {"agent_selection": "best"}),
    ("negative-timeout", {"pending_timeout": -1}),
    ("empty-types", {"allowed_session_types": []}),
    ("unknown-type", {"allowed_session_types": ["cron"]}),
    ("repeated-type", {"allowed_session_types": ["batch", "batch"]}),
    ("bad-queue-policy", {"queue_policy": "fair"}),
    ("bad-slot-name", {"resource_priority": ["GPU!"]}),
    ("unknown-field", {"weight": 3}),
]


@pytest.mark.parametrize(("case", "patch"), BAD, ids=[b[0] for b in BAD])
async def test_bad_bodies_are_422(api: Api, case: str, patch: dict[str, Any]) -> None:
    before = await api.counts()
    resp = await api.client.post("/v2/scaling-groups", json={"name": "x", **patch}, headers=api.admin)
    await assert_problem(resp, 422)
    resp = await api.client.patch("/v2/scaling-groups/default", json=patch, headers=api.admin)
    await assert_problem(resp, 422)
    assert await api.counts() == before
    async with api.engine.connect() as conn:
        assert (await conn.execute(select(ScalingGroup.scheduler))).scalars().all() == ["fifo"]


async def test_unknown_names_are_listed_with_the_known_ones(api: Api) -> None:
    resp = await api.client.post(
        "/v2/scaling-groups", json={"name": "x", "scheduler": "random"}, headers=api.admin
    )
    detail = str((await assert_problem(resp, 422))["detail"])
    assert "random" in detail and all(n in detail for n in ("fifo", "lifo", "drf"))
    resp = await api.client.patch(
        "/v2/scaling-groups/default", json={"agent_selection": "best"}, headers=api.admin
    )
    detail = str((await assert_problem(resp, 422))["detail"])
    assert all(n in detail for n in ("concentrated", "dispersed", "roundrobin"))


async def test_patch_null_missing_and_auth(api: Api) -> None:
    await assert_problem(
        await api.client.patch("/v2/scaling-groups/default", json={"scheduler": None}, headers=api.admin), 422
    )
    await assert_problem(
        await api.client.patch("/v2/scaling-groups/nowhere", json={"scheduler": "fifo"}, headers=api.admin),
        404,
    )
    await assert_problem(await api.client.get("/v2/scaling-groups/nowhere", headers=api.alice), 404)
    await assert_problem(await api.client.post("/v2/scaling-groups", json={"name": "x"}), 401)
    await assert_problem(
        await api.client.post("/v2/scaling-groups", json={"name": "x"}, headers=api.alice), 403
    )
    await assert_problem(
        await api.client.patch("/v2/scaling-groups/default", json={"scheduler": "lifo"}, headers=api.alice),
        403,
    )
    await assert_problem(await api.client.get("/v2/scaling-groups"), 401)


async def test_allowed_session_types_are_enforced_at_creation(api: Api) -> None:
    resp = await api.client.post(
        "/v2/scaling-groups",
        json={"name": "inter", "allowed_session_types": ["interactive"]},
        headers=api.admin,
    )
    assert resp.status == 201
    await add_agent(api.engine, "agent-i", scaling_group="inter")
    before = await api.counts()
    body = await assert_problem(await api.create(api.alice, scaling_group="inter"), 422)
    assert "batch" in str(body["detail"])
    assert await api.counts() == before
    ok = await api.create(api.alice, scaling_group="inter", type="interactive", command=None)
    assert ok.status == 201, await ok.text()
