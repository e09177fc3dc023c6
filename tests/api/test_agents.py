"""GET /v2/agents[/{id}]: occupancy is derived from the agent's placed kernels that have not ended."""

from __future__ import annotations

from sqlalchemy import update

from sokovan.db.models import Agent
from tests.api.conftest import Api, add_agent
from tests.api.tenancy_helpers import place_kernels
from tests.api.test_auth_and_errors import assert_problem


async def _session(api: Api, cpu: int, mem: str, cluster_size: int = 1) -> str:
    resp = await api.create(api.alice, resources={"cpu": cpu, "mem": mem}, cluster_size=cluster_size)
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["id"])


async def test_occupied_slots_and_running_kernels_are_derived(api: Api) -> None:
    await place_kernels(api.engine, await _session(api, 1, "1g", cluster_size=2), "agent-1", "RUNNING")
    await place_kernels(api.engine, await _session(api, 2, "512m"), "agent-1", "PREPARING")
    await place_kernels(api.engine, await _session(api, 3, "1g"), "agent-1", "TERMINATED")  # ended
    await _session(api, 1, "1g")  # pending, on no agent
    resp = await api.client.get("/v2/agents/agent-1", headers=api.alice)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["occupied_slots"] == {"cpu": "4", "mem": str(2 * 2**30 + 512 * 2**20)}
    assert body["running_kernels"] == 3
    assert body["available_slots"] == {"cpu": "4", "mem": "8589934592"}
    assert (body["status"], body["scaling_group"], body["schedulable"]) == ("READY", "default", True)
    assert body["images"] == ["python:3", "shell"]
    # a user is not shown where an agent serves RPC; an admin is
    assert (body["heartbeat_seq"], body["last_heartbeat_at"], body["rpc_addr"]) == (0, None, None)
    admin_view = await (await api.client.get("/v2/agents/agent-1", headers=api.admin)).json()
    assert admin_view["rpc_addr"] == "127.0.0.1:1"
    other = await (await api.client.get("/v2/agents/agent-2", headers=api.alice)).json()
    assert (other["occupied_slots"], other["running_kernels"]) == ({}, 0)


async def test_the_view_shows_the_node_lifecycle(api: Api) -> None:
    await add_agent(
        api.engine,
        "agent-3",
        status="DEGRADED",
        agent_class="sensitive",
        health={"gpus": 2, "temperature": 71},
        status_info={"reason": "silent for 31s", "handler": "MarkDegraded"},
        rejected_beats=3,
        boot_id="boot-9",
    )
    body = await (await api.client.get("/v2/agents/agent-3", headers=api.alice)).json()
    assert (body["status"], body["agent_class"], body["boot_id"]) == ("DEGRADED", "sensitive", "boot-9")
    assert body["health"] == {"gpus": 2, "temperature": 71}
    assert body["status_info"] == {"reason": "silent for 31s", "handler": "MarkDegraded"}
    assert (body["rejected_beats"], body["disabled"]) == (3, False)
    assert body["status_changed_at"] is not None
    # The column says it may be scheduled; the status says it takes no new kernels now.
    assert body["schedulable"] is False
    ready = await (await api.client.get("/v2/agents/agent-1", headers=api.alice)).json()
    assert (ready["agent_class"], ready["health"], ready["status_info"], ready["schedulable"]) == (
        "standard",
        {},
        {},
        True,
    )
    async with api.engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "agent-1").values(schedulable=False))
    held = await (await api.client.get("/v2/agents?status=READY", headers=api.alice)).json()
    assert [(a["id"], a["schedulable"]) for a in held["items"]] == [("agent-1", False), ("agent-2", True)]


async def test_list_filters_and_pages(api: Api) -> None:
    await add_agent(api.engine, "agent-3", status="DRAINED")
    async with api.engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "agent-2").values(heartbeat_seq=7))
    body = await (await api.client.get("/v2/agents", headers=api.alice)).json()
    assert [a["id"] for a in body["items"]] == ["agent-1", "agent-2", "agent-3"]
    assert body["next_cursor"] is None
    assert body["items"][1]["heartbeat_seq"] == 7
    ready = await (await api.client.get("/v2/agents?status=ready", headers=api.alice)).json()
    assert [a["id"] for a in ready["items"]] == ["agent-1", "agent-2"]
    drained = await (await api.client.get("/v2/agents?status=DRAINED,DOWN", headers=api.alice)).json()
    assert [a["id"] for a in drained["items"]] == ["agent-3"]
    none = await (await api.client.get("/v2/agents?scaling_group=gpu", headers=api.alice)).json()
    assert none == {"items": [], "next_cursor": None}
    first = await (await api.client.get("/v2/agents?limit=2", headers=api.admin)).json()
    assert [a["id"] for a in first["items"]] == ["agent-1", "agent-2"]
    rest = await (
        await api.client.get(f"/v2/agents?limit=2&cursor={first['next_cursor']}", headers=api.admin)
    ).json()
    assert [a["id"] for a in rest["items"]] == ["agent-3"] and rest["next_cursor"] is None


async def test_errors(api: Api) -> None:
    await assert_problem(await api.client.get("/v2/agents"), 401)
    await assert_problem(await api.client.get("/v2/agents/agent-1"), 401)
    await assert_problem(await api.client.get("/v2/agents/nope", headers=api.alice), 404)
    for query in ("status=SLEEPING", "limit=0", "cursor=%%%"):
        await assert_problem(await api.client.get(f"/v2/agents?{query}", headers=api.alice), 400)


async def test_openapi_lists_the_admin_routes(api: Api) -> None:
    doc = await (await api.client.get("/v2/openapi.json")).json()
    paths = doc["paths"]
    assert {"get", "put"} <= paths["/v2/resource-policies/{name}"].keys()
    assert "put" in paths["/v2/projects/{name}"] and "put" in paths["/v2/domains/{name}"]
    assert {"get", "post"} <= paths["/v2/scaling-groups"].keys()
    assert {"get", "patch"} <= paths["/v2/scaling-groups/{name}"].keys()
    assert "get" in paths["/v2/agents"] and "get" in paths["/v2/agents/{id}"]
    assert "get" in paths["/v2/agents/{id}/history"]
    for action in ("drain", "undrain", "disable", "enable"):
        op = paths[f"/v2/agents/{{id}}/{action}"]["post"]
        assert {"200", "403", "404", "409", "422"} <= op["responses"].keys()
    assert "403" in paths["/v2/scaling-groups"]["post"]["responses"]
    assert "409" in paths["/v2/scaling-groups"]["post"]["responses"]
    schemas = doc["components"]["schemas"]
    for name in (
        "AgentOut",
        "AgentList",
        "AgentDrainRequest",
        "AgentActionRequest",
        "AgentHistoryList",
        "ScalingGroupCreate",
        "ResourcePolicyPut",
        "TenantLimitsPut",
    ):
        assert name in schemas
    assert {"from", "to", "actor", "reason", "at"} <= schemas["AgentHistoryItem"]["properties"].keys()
