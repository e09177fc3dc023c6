"""Creation-time refusals from limits: quotas (every violated scope named), a zero concurrency
limit, and the pending limit (429)."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest
from sqlalchemy import update

from sokovan.common.slots import ResourceSlots
from sokovan.db.models import Session
from sokovan.manager.controller.admission import quota_violations
from sokovan.manager.repositories.tenancy import OwnerLimits
from sokovan.state.quota import quota_of
from tests.api.conftest import Api
from tests.api.tenancy_helpers import bind_policy, place_kernels, put
from tests.api.test_auth_and_errors import assert_problem

# 2 kernels x (cpu 2, mem 1g) on two agents: cpu 4, mem 2g in all
BIG = {"resources": {"cpu": 2, "mem": "1g"}, "cluster_size": 2, "cluster_mode": "multi-node"}


async def test_every_violated_scope_is_named(api: Api) -> None:
    await put(api, "/v2/resource-policies/small", {"total_resource_slots": {"cpu": 3, "mem": "8g"}})
    await bind_policy(api.engine, "alice", "small")
    await put(api, "/v2/projects/default", {"total_resource_slots": {"cpu": 2, "mem": "8g"}})
    await put(api, "/v2/domains/default", {"total_resource_slots": {"cpu": 10}})  # mem unnamed: 0
    before = await api.counts()
    body = await assert_problem(await api.create(api.alice, **BIG), 422)
    assert body["title"] == "Quota exceeded"
    assert body["detail"] == (
        "keypair policy 'small': cpu 4 > 3; project 'default': cpu 4 > 2; "
        f"domain 'default': mem {2 * 2**30} > 0"
    )
    assert await api.counts() == before
    # default_for_unspecified: unlimited lets the unnamed slot through
    await put(api, "/v2/domains/default", {"default_for_unspecified": "unlimited"})
    body = await assert_problem(await api.create(api.alice, **BIG), 422)
    assert "domain" not in str(body["detail"])
    # bob has no policy: only the project (shared with alice) still refuses him
    body = await assert_problem(await api.create(api.bob, **BIG), 422)
    assert body["detail"] == "project 'default': cpu 4 > 2"


async def test_within_every_quota_is_created(api: Api) -> None:
    await put(api, "/v2/resource-policies/small", {"total_resource_slots": {"cpu": 4, "mem": "2g"}})
    await bind_policy(api.engine, "alice", "small")
    await put(
        api,
        "/v2/projects/default",
        {"total_resource_slots": {"cpu": 4}, "default_for_unspecified": "unlimited"},
    )
    resp = await api.create(api.alice, **BIG)
    assert resp.status == 201, await resp.text()
    # a quota limits one request, not what is in use: a second one waits in PENDING
    resp = await api.create(api.alice, **BIG)
    assert resp.status == 201, await resp.text()


async def test_zero_concurrent_sessions_is_refused(api: Api) -> None:
    await put(api, "/v2/resource-policies/none", {"max_concurrent_sessions": 0})
    await bind_policy(api.engine, "alice", "none")
    before = await api.counts()
    body = await assert_problem(await api.create(api.alice), 422)
    assert body["title"] == "Quota exceeded"
    assert "max_concurrent_sessions" in str(body["detail"]) and "'none'" in str(body["detail"])
    assert await api.counts() == before
    await put(api, "/v2/resource-policies/none", {"max_concurrent_sessions": 1})
    assert (await api.create(api.alice)).status == 201


async def test_max_pending_sessions_is_429(api: Api) -> None:
    await put(api, "/v2/resource-policies/two", {"max_pending_sessions": 2})
    await bind_policy(api.engine, "alice", "two")
    first = await (await api.create(api.alice, creation_id="one")).json()
    assert (await api.create(api.alice)).status == 201
    before = await api.counts()
    body = await assert_problem(await api.create(api.alice), 429)
    assert body["title"] == "Too many pending sessions"
    assert "2" in str(body["detail"])
    assert await api.counts() == before
    # a repeated creation_id answers with the existing session, it adds nothing
    again = await api.create(api.alice, creation_id="one")
    assert again.status == 200 and (await again.json())["id"] == first["id"]
    assert (await api.create(api.bob)).status == 201  # another owner is not counted
    resp = await api.client.delete(f"/v2/sessions/{first['id']}", headers=api.alice)
    assert resp.status == 202  # PENDING -> CANCELLED: room for one more
    assert (await api.create(api.alice)).status == 201
    await assert_problem(await api.create(api.alice), 429)


async def test_sessions_placed_do_not_count_as_pending(api: Api) -> None:
    await put(api, "/v2/resource-policies/one", {"max_pending_sessions": 1})
    await bind_policy(api.engine, "alice", "one")
    first = await (await api.create(api.alice)).json()
    await assert_problem(await api.create(api.alice), 429)
    await place_kernels(api.engine, first["id"], "agent-1")
    async with api.engine.begin() as conn:
        await conn.execute(update(Session).values(status="RUNNING"))
    assert (await api.create(api.alice)).status == 201


async def test_concurrent_creates_respect_the_pending_limit(api: Api) -> None:
    await put(api, "/v2/resource-policies/three", {"max_pending_sessions": 3})
    await bind_policy(api.engine, "alice", "three")
    resps = await asyncio.gather(*(api.create(api.alice) for _ in range(6)))
    assert sorted(r.status for r in resps) == [201, 201, 201, 429, 429, 429]


CASES = [
    ("no limits", None, None, None, None, {"cpu": 8}, []),
    ("within", {"cpu": "8"}, None, None, None, {"cpu": 8}, []),
    ("over policy", {"cpu": "4"}, None, None, None, {"cpu": 8}, ["keypair policy 'p': cpu 8 > 4"]),
    (
        "unnamed slot is 0",
        {"cpu": "8"},
        None,
        None,
        None,
        {"cpu": 1, "mem": 1},
        ["keypair policy 'p': mem 1 > 0"],
    ),
    ("zero amount needs nothing", {"cpu": "8"}, None, None, None, {"cpu": 1, "cuda.device": 0}, []),
    (
        "all scopes",
        {"cpu": "4"},
        {"cpu": "6"},
        {"cpu": "7"},
        None,
        {"cpu": 8},
        ["keypair policy 'p': cpu 8 > 4", "project 'pr': cpu 8 > 6", "domain 'd': cpu 8 > 7"],
    ),
    ("zero concurrency", None, None, None, 0, {"cpu": 1}, ["keypair policy 'p': max_concurrent_sessions 0"]),
    (
        "zero concurrency with quota",
        {"cpu": "4"},
        None,
        None,
        0,
        {"cpu": 8},
        ["keypair policy 'p': cpu 8 > 4, max_concurrent_sessions 0"],
    ),
]


@pytest.mark.parametrize(
    ("case", "policy", "project", "domain", "concurrent", "request_", "want"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_quota_violations_table(
    case: str,
    policy: dict[str, str] | None,
    project: dict[str, str] | None,
    domain: dict[str, str] | None,
    concurrent: int | None,
    request_: dict[str, int],
    want: list[str],
) -> None:
    limits = OwnerLimits(
        policy_name="p",
        policy_quota=quota_of("keypair policy 'p'", policy, "limited"),
        project_quota=quota_of("project 'pr'", project, "limited"),
        domain_quota=quota_of("domain 'd'", domain, "limited"),
        max_concurrent_sessions=concurrent,
        max_pending_sessions=None,
    )
    total = ResourceSlots({k: Decimal(v) for k, v in request_.items()})
    assert quota_violations(limits, total) == want
