"""POST /v2/sessions?dry_run=true and `sokovan session create --dry-run`: the same admission as a
create, a placement against the current cluster, and nothing written."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Api
from tests.api.tenancy_helpers import bind_policy, history_count, place_kernels, put
from tests.api.test_auth_and_errors import assert_problem
from tests.cli.conftest import run_cli


async def dry_run(api: Api, headers: dict[str, str], **body: Any) -> Any:
    payload = {"image": "python:3", "type": "batch", "command": "echo hi", **body}
    return await api.client.post("/v2/sessions?dry_run=true", json=payload, headers=headers)


async def _snapshot(api: Api) -> tuple[tuple[int, int, int], int]:
    return await api.counts(), await history_count(api.engine)


async def test_placeable_names_an_agent_per_kernel_and_writes_nothing(api: Api) -> None:
    before = await _snapshot(api)
    resp = await dry_run(api, api.alice, resources={"cpu": 1})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["placeable"] is True and body["pending_reason"] is None
    assert len(body["agents"]) == 1 and body["agents"][0] in {"agent-1", "agent-2"}
    resp = await dry_run(api, api.alice, resources={"cpu": 3}, cluster_size=2, cluster_mode="multi-node")
    body = await resp.json()
    assert body["placeable"] is True
    assert sorted(body["agents"]) == ["agent-1", "agent-2"]  # multi-node: one kernel per agent
    assert await _snapshot(api) == before


async def test_not_placeable_now_gives_the_pending_reason(api: Api) -> None:
    for agent in ("agent-1", "agent-2"):
        created = await (await api.create(api.bob, resources={"cpu": 4})).json()
        await place_kernels(api.engine, created["id"], agent)
    before = await _snapshot(api)
    resp = await dry_run(api, api.alice, resources={"cpu": 2})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert (body["placeable"], body["agents"]) == (False, [])
    assert "0/2" in body["pending_reason"] and "cpu" in body["pending_reason"]
    assert await _snapshot(api) == before


async def test_a_session_that_fits_only_by_preempting_names_its_victims(api: Api) -> None:
    from sqlalchemy import update

    from sokovan.db.models import ScalingGroup, Session

    victims = []
    for agent in ("agent-1", "agent-2"):
        created = await (await api.create(api.bob, resources={"cpu": 4}, priority=5)).json()
        await place_kernels(api.engine, created["id"], agent)
        victims.append(created["id"])
    async with api.engine.begin() as conn:
        await conn.execute(update(Session).values(status="RUNNING", preemptible=True))
    body = await (await dry_run(api, api.alice, resources={"cpu": 2})).json()
    assert (body["placeable"], body["preempts"]) == (False, [])  # the group's mode is off
    async with api.engine.begin() as conn:
        await conn.execute(update(ScalingGroup).values(preemption={"mode": "terminate", "grace_period": 5}))
    before = await _snapshot(api)
    body = await (await dry_run(api, api.alice, resources={"cpu": 2})).json()
    assert body["placeable"] is True and body["pending_reason"] is None
    assert len(body["preempts"]) == 1 and body["preempts"][0] in victims
    assert body["agents"] == [("agent-1", "agent-2")[victims.index(body["preempts"][0])]]
    assert await _snapshot(api) == before  # nothing written, nobody preempted


REFUSED: list[tuple[str, dict[str, Any], int]] = [
    ("unknown-image", {"image": "nope:1"}, 422),
    ("too-big-for-any-agent", {"resources": {"cpu": 64}}, 422),
    ("unknown-scaling-group", {"scaling_group": "nowhere"}, 422),
    ("bad-field", {"cluster_size": 0}, 422),
    ("quota", {"resources": {"cpu": 4}}, 422),
]


@pytest.mark.parametrize(("case", "patch", "status"), REFUSED, ids=[r[0] for r in REFUSED])
async def test_refusals_are_those_of_a_create(
    api: Api, case: str, patch: dict[str, Any], status: int
) -> None:
    await put(api, "/v2/resource-policies/small", {"total_resource_slots": {"cpu": 2, "mem": "8g"}})
    await bind_policy(api.engine, "alice", "small")
    before = await _snapshot(api)
    dry = await assert_problem(await dry_run(api, api.alice, **patch), status)
    real = await assert_problem(await api.create(api.alice, **patch), status)
    assert (dry["title"], dry["detail"]) == (real["title"], real["detail"])
    assert await _snapshot(api) == before


async def test_pending_limit_applies_to_a_dry_run(api: Api) -> None:
    await put(api, "/v2/resource-policies/one", {"max_pending_sessions": 1})
    await bind_policy(api.engine, "alice", "one")
    assert (await dry_run(api, api.alice)).status == 200
    assert (await api.create(api.alice)).status == 201
    await assert_problem(await dry_run(api, api.alice), 429)
    await assert_problem(await dry_run(api, {}), 401)


async def test_dry_run_is_documented(api: Api) -> None:
    doc = await (await api.client.get("/v2/openapi.json")).json()
    create = doc["paths"]["/v2/sessions"]["post"]
    assert any(p["name"] == "dry_run" for p in create["parameters"])
    ok = create["responses"]["200"]["content"]["application/json"]["schema"]
    assert {"$ref": "#/components/schemas/DryRunResponse"} in ok["oneOf"]
    assert set(doc["components"]["schemas"]["DryRunResponse"]["properties"]) == {
        "placeable",
        "agents",
        "pending_reason",
        "preempts",
    }
    assert "429" in create["responses"]


async def test_cli_dry_run_prints_the_answer(api: Api, service_env: dict[str, str]) -> None:
    env = {
        **service_env,
        "SOKOVAN_API": str(api.client.make_url("")).rstrip("/"),
        "SOKOVAN_TOKEN": api.alice["Authorization"].removeprefix("Bearer "),
    }
    before = await _snapshot(api)
    args = ("session", "create", "--image", "python:3", "--command", "true", "--dry-run")
    res = await run_cli(*args, "--json", env=env)
    assert res.code == 0, res.err
    answer = res.json()
    assert answer["placeable"] is True and len(answer["agents"]) == 1
    res = await run_cli(
        *args, "--resources", "cpu=4", "--cluster-size", "3", "--cluster-mode", "multi-node", env=env
    )
    assert res.code != 0 and "can never be satisfied" in res.err.lower()
    for agent in ("agent-1", "agent-2"):
        created = await (await api.create(api.bob, resources={"cpu": 4})).json()
        await place_kernels(api.engine, created["id"], agent)
    before = await _snapshot(api)
    res = await run_cli(*args, env=env)
    assert res.code == 0, res.err
    assert "not placeable" in res.out and "cpu" in res.out
    assert await _snapshot(api) == before
