"""PUT/GET /v2/resource-policies/{name}, PUT /v2/projects/{name}, PUT /v2/domains/{name}."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from sokovan.db.models import AuditLog, Domain, KeypairResourcePolicy, Project
from tests.api.conftest import Api
from tests.api.tenancy_helpers import audit_actions, bind_policy, put
from tests.api.test_auth_and_errors import assert_problem

POLICY = "/v2/resource-policies/small"


async def test_put_policy_creates_then_replaces(api: Api) -> None:
    body = await put(
        api,
        POLICY,
        {
            "total_resource_slots": {"cpu": 4, "mem": "8g", "cuda.device": None},
            "max_concurrent_sessions": 0,
            "max_pending_sessions": 3,
        },
    )
    assert body["name"] == "small"
    assert body["total_resource_slots"] == {"cpu": "4", "mem": "8589934592"}
    assert body["default_for_unspecified"] == "limited"
    assert (body["max_concurrent_sessions"], body["max_pending_sessions"]) == (0, 3)
    assert body["max_session_lifetime"] is None
    async with api.engine.connect() as conn:
        stored = (
            await conn.execute(
                select(KeypairResourcePolicy.total_resource_slots, KeypairResourcePolicy.max_pending_sessions)
            )
        ).one()
    assert tuple(stored) == ({"cpu": "4", "mem": "8589934592"}, 3)
    # PUT replaces the whole policy: what is left out is unlimited again
    again = await put(api, POLICY, {"max_session_lifetime": 3600, "default_for_unspecified": "unlimited"})
    assert again["total_resource_slots"] is None
    assert (again["max_concurrent_sessions"], again["max_pending_sessions"]) == (None, None)
    assert (again["max_session_lifetime"], again["default_for_unspecified"]) == (3600, "unlimited")
    got = await api.client.get(POLICY, headers=api.admin)
    assert got.status == 200
    assert await got.json() == again
    actions = [a for a in await audit_actions(api.engine) if a[0] == "resource_policy.put"]
    assert actions == [("resource_policy.put", "small")] * 2


async def test_policy_audit_row_names_the_admin_and_values(api: Api) -> None:
    await put(api, POLICY, {"max_concurrent_sessions": 2})
    async with api.engine.connect() as conn:
        row = (
            await conn.execute(
                select(AuditLog.actor, AuditLog.detail).where(AuditLog.action.like("resource%"))
            )
        ).one()
    assert row.actor.startswith("AK")
    assert row.detail["max_concurrent_sessions"] == 2


BAD_POLICIES: list[tuple[str, dict[str, Any]]] = [
    ("slot-not-a-number", {"total_resource_slots": {"cpu": "abc"}}),
    ("slot-negative", {"total_resource_slots": {"cpu": -1}}),
    ("unit-on-cpu", {"total_resource_slots": {"cpu": "4g"}}),
    ("bad-slot-name", {"total_resource_slots": {"CPU!": 1}}),
    ("negative-count", {"max_concurrent_sessions": -1}),
    ("bad-default", {"default_for_unspecified": "sometimes"}),
    ("unknown-field", {"max_gpus": 1}),
]


@pytest.mark.parametrize(("case", "body"), BAD_POLICIES, ids=[b[0] for b in BAD_POLICIES])
async def test_bad_policy_bodies_are_422_and_write_nothing(api: Api, case: str, body: dict[str, Any]) -> None:
    before = await api.counts()
    await assert_problem(await api.client.put(POLICY, json=body, headers=api.admin), 422)
    assert await api.counts() == before
    await assert_problem(await api.client.get(POLICY, headers=api.admin), 404)


async def test_admin_writes_need_a_token_and_an_admin(api: Api) -> None:
    writes = [
        ("PUT", POLICY, {}),
        ("PUT", "/v2/projects/p1", {}),
        ("PUT", "/v2/domains/d1", {}),
    ]
    for method, path, body in writes:
        await assert_problem(await api.client.request(method, path, json=body), 401)
        await assert_problem(await api.client.request(method, path, json=body, headers=api.alice), 403)
    await assert_problem(await api.client.get(POLICY), 401)


async def test_user_reads_only_its_own_policy(api: Api) -> None:
    await put(api, POLICY, {"max_pending_sessions": 1})
    await put(api, "/v2/resource-policies/other", {})
    await assert_problem(await api.client.get(POLICY, headers=api.alice), 404)
    await bind_policy(api.engine, "alice", "small")
    resp = await api.client.get(POLICY, headers=api.alice)
    assert resp.status == 200
    assert (await resp.json())["max_pending_sessions"] == 1
    await assert_problem(await api.client.get("/v2/resource-policies/other", headers=api.alice), 404)


async def test_keypair_with_unknown_policy_stays_refused_and_known_one_works(api: Api) -> None:
    resp = await api.client.post(
        "/v2/keypairs", json={"user": "carol", "project": "p", "resource_policy": "small"}, headers=api.admin
    )
    await assert_problem(resp, 422)
    await put(api, POLICY, {})
    resp = await api.client.post(
        "/v2/keypairs", json={"user": "carol", "project": "p", "resource_policy": "small"}, headers=api.admin
    )
    assert resp.status == 201, await resp.text()


async def test_put_domain_creates_and_keeps_fields_left_out(api: Api) -> None:
    body = await put(api, "/v2/domains/research", {"total_resource_slots": {"cpu": 16}})
    assert body["name"] == "research"
    assert body["total_resource_slots"] == {"cpu": "16"}
    assert (body["default_for_unspecified"], body["retry_policy_default"]) == ("limited", None)
    body = await put(api, "/v2/domains/research", {"retry_policy_default": {"max_retries": 2}})
    assert body["total_resource_slots"] == {"cpu": "16"}  # left out: kept
    assert body["retry_policy_default"]["max_retries"] == 2
    assert body["retry_policy_default"]["jitter"] == "deterministic"
    body = await put(
        api, "/v2/domains/research", {"retry_policy_default": None, "total_resource_slots": None}
    )
    assert (body["retry_policy_default"], body["total_resource_slots"]) == (None, None)
    async with api.engine.connect() as conn:
        names = set((await conn.execute(select(Domain.name))).scalars())
    assert names == {"default", "research"}
    assert ("domain.put", "research") in await audit_actions(api.engine)


async def test_put_project_in_a_domain(api: Api) -> None:
    body = await put(api, "/v2/projects/default", {"total_resource_slots": {"cpu": 6, "mem": "16g"}})
    assert body["domain"] == "default"
    assert body["total_resource_slots"] == {"cpu": "6", "mem": str(16 * 2**30)}
    await put(api, "/v2/domains/research", {})
    body = await put(api, "/v2/projects/default?domain=research", {"default_for_unspecified": "unlimited"})
    assert (body["domain"], body["default_for_unspecified"]) == ("research", "unlimited")
    async with api.engine.connect() as conn:
        rows = (
            await conn.execute(select(Project.domain_name, Project.name).order_by(Project.domain_name))
        ).all()
    assert [tuple(r) for r in rows] == [("default", "default"), ("research", "default")]
    assert ("project.put", "research/default") in await audit_actions(api.engine)


async def test_project_in_missing_domain_and_bad_bodies(api: Api) -> None:
    before = await api.counts()
    resp = await api.client.put("/v2/projects/p1?domain=nowhere", json={}, headers=api.admin)
    await assert_problem(resp, 422)
    bad_bodies: list[dict[str, Any]] = [
        {"retry_policy_default": {"max_retries": -1}},
        {"retry_policy_default": {"eligible_causes": ["USER_CANCELLED"]}},
        {"total_resource_slots": {"mem": "lots"}},
    ]
    for bad in bad_bodies:
        await assert_problem(await api.client.put("/v2/projects/p1", json=bad, headers=api.admin), 422)
        await assert_problem(await api.client.put("/v2/domains/d1", json=bad, headers=api.admin), 422)
    resp = await api.client.put("/v2/domains/bad%20name", json={}, headers=api.admin)
    await assert_problem(resp, 422)
    assert await api.counts() == before
