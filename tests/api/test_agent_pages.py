"""`GET /v2/agents` from rendered entries (`agent_pages`): the same page as the models give, a
tag that ignores heartbeats but nothing else, fresh entries after any change, and pages and
users kept apart."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from sqlalchemy import insert, update

from sokovan.db.models import Agent, ScalingGroup
from sokovan.manager.api.admin_schemas import AgentList
from sokovan.manager.api.agents import PAGES_KEY
from tests.api.conftest import Api, add_agent
from tests.api.tenancy_helpers import place_kernels


async def _page(api: Api, headers: dict[str, str], query: str = "") -> tuple[int, str, Any]:
    resp = await api.client.get(f"/v2/agents{query}", headers=headers)
    body = await resp.json() if resp.status == 200 else None
    return resp.status, resp.headers.get("ETag", ""), body


async def test_the_page_is_what_the_models_give_and_a_heartbeat_keeps_the_tag(api: Api) -> None:
    status, tag, body = await _page(api, api.admin)
    assert status == 200
    assert AgentList.model_validate(body).model_dump(mode="json") == body  # the schema's own shape
    assert [a["id"] for a in body["items"]] == ["agent-1", "agent-2"] and body["next_cursor"] is None
    beat = dt.datetime.now(dt.UTC)
    async with api.engine.begin() as conn:
        await conn.execute(update(Agent).values(last_heartbeat_at=beat, heartbeat_seq=7))
    # Only heartbeats changed: a poller holding the tag is told nothing changed...
    again = await api.client.get("/v2/agents", headers={**api.admin, "If-None-Match": tag})
    assert again.status == 304 and again.headers["ETag"] == tag
    # ...and one without it gets the fresh heartbeat, under the same weak tag.
    status, same_tag, fresh = await _page(api, api.admin)
    assert same_tag == tag
    assert {a["heartbeat_seq"] for a in fresh["items"]} == {7}
    assert all(a["last_heartbeat_at"] is not None for a in fresh["items"])


async def test_a_beat_alone_patches_the_entry_as_a_full_render_would(api: Api) -> None:
    """The entry of an agent whose heartbeat alone moved has its four heartbeat fields read again
    and put in; the page is byte for byte what rendering every agent afresh gives."""
    await _page(api, api.admin)  # every entry rendered once
    device = {"id": "cuda:0", "uuid": "GPU-1", "model": "H200", "memory": 1 << 30, "temperature": 41.5}
    beat = dt.datetime.now(dt.UTC)
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Agent)
            .where(Agent.id == "agent-1")
            .values(last_heartbeat_at=beat, heartbeat_seq=42, health={"load1": 0.5}, devices=[device])
        )
    patched = await api.client.get("/v2/agents", headers=api.admin)
    body = await patched.read()
    pages = api.client.server.app[PAGES_KEY]
    pages._entries.clear()  # what a worker that never saw the agents renders
    fresh = await api.client.get("/v2/agents", headers=api.admin)
    assert body == await fresh.read()
    one = next(a for a in json.loads(body)["items"] if a["id"] == "agent-1")
    shown = (one["heartbeat_seq"], one["health"], one["devices"][0]["temperature"])
    assert shown == (42, {"load1": 0.5}, 41.5)
    assert one["last_heartbeat_at"] is not None


async def test_new_kernels_patch_the_occupancy_as_a_full_render_would(api: Api) -> None:
    """An agent whose live kernels alone changed has its occupancy read again and put in its
    entry, with a new tag; its heartbeat moving at the same time is put in too."""
    _, tag, _ = await _page(api, api.admin)
    created = await api.create(api.alice, resources={"cpu": 3, "mem": "2g"})
    await place_kernels(api.engine, str((await created.json())["id"]), "agent-2", "RUNNING")
    async with api.engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "agent-2").values(heartbeat_seq=9))
    patched = await api.client.get("/v2/agents", headers={**api.admin, "If-None-Match": tag})
    assert patched.status == 200 and patched.headers["ETag"] != tag
    body = await patched.read()
    api.client.server.app[PAGES_KEY]._entries.clear()
    fresh = await api.client.get("/v2/agents", headers=api.admin)
    assert body == await fresh.read()
    two = next(a for a in json.loads(body)["items"] if a["id"] == "agent-2")
    assert (two["occupied_slots"]["cpu"], two["running_kernels"], two["heartbeat_seq"]) == ("3", 1, 9)


async def test_occupancy_status_and_new_agents_change_the_page_at_once(api: Api) -> None:
    _, tag, _ = await _page(api, api.admin)
    created = await api.create(api.alice, resources={"cpu": 2, "mem": "1g"})
    await place_kernels(api.engine, str((await created.json())["id"]), "agent-1", "RUNNING")
    status, placed_tag, body = await _page(api, {**api.admin, "If-None-Match": tag})
    assert status == 200 and placed_tag != tag
    one = next(a for a in body["items"] if a["id"] == "agent-1")
    assert (one["occupied_slots"]["cpu"], one["running_kernels"]) == ("2", 1)

    async with api.engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "agent-2").values(schedulable=False))
    status, held_tag, body = await _page(api, {**api.admin, "If-None-Match": placed_tag})
    assert status == 200 and held_tag != placed_tag
    assert next(a for a in body["items"] if a["id"] == "agent-2")["schedulable"] is False

    await add_agent(api.engine, "agent-3")
    status, _, body = await _page(api, {**api.admin, "If-None-Match": held_tag})
    assert status == 200 and [a["id"] for a in body["items"]] == ["agent-1", "agent-2", "agent-3"]


async def test_pages_filters_and_bad_cursors(api: Api) -> None:
    async with api.engine.begin() as conn:
        await conn.execute(insert(ScalingGroup).values(name="gpu"))
    await add_agent(api.engine, "agent-3", status="DRAINING", scaling_group="gpu")
    _, first_tag, first = await _page(api, api.admin, "?limit=2")
    assert [a["id"] for a in first["items"]] == ["agent-1", "agent-2"] and first["next_cursor"]
    _, second_tag, second = await _page(api, api.admin, f"?limit=2&cursor={first['next_cursor']}")
    assert [a["id"] for a in second["items"]] == ["agent-3"] and second["next_cursor"] is None
    assert first_tag != second_tag  # each page its own tag
    _, _, draining = await _page(api, api.admin, "?status=draining")
    assert [a["id"] for a in draining["items"]] == ["agent-3"]
    _, _, gpu = await _page(api, api.admin, "?scaling_group=gpu")
    assert [a["id"] for a in gpu["items"]] == ["agent-3"]
    bad = await api.client.get("/v2/agents?cursor=not-a-cursor", headers=api.admin)
    assert bad.status == 400 and bad.content_type == "application/problem+json"
    too_big = await api.client.get("/v2/agents?limit=501", headers=api.admin)
    assert too_big.status == 400


async def test_users_see_less_and_never_another_keypairs_key(api: Api) -> None:
    alice_key = (await (await api.client.get("/v2/whoami", headers=api.alice)).json())["access_key"]
    await add_agent(
        api.engine, "agent-3", status_info={"preempted_by_access_key": alice_key, "rpc_addr": "10.0.0.9:1"}
    )
    _, admin_tag, admin = await _page(api, api.admin)
    _, alice_tag, alice = await _page(api, api.alice)
    _, bob_tag, bob = await _page(api, api.bob)
    assert len({admin_tag, alice_tag, bob_tag}) == 3
    by_admin = {a["id"]: a for a in admin["items"]}
    assert by_admin["agent-3"]["status_info"]["rpc_addr"] == "10.0.0.9:1"
    assert by_admin["agent-1"]["rpc_addr"] == "127.0.0.1:1"
    by_alice = {a["id"]: a for a in alice["items"]}
    by_bob = {a["id"]: a for a in bob["items"]}
    assert by_alice["agent-3"]["status_info"] == {"preempted_by_access_key": alice_key}
    assert by_bob["agent-3"]["status_info"] == {}
    assert all(a["rpc_addr"] is None for a in [*alice["items"], *bob["items"]])
    # Alice's tag is not Bob's: he cannot learn from a 304 what her page holds.
    assert (await api.client.get("/v2/agents", headers={**api.bob, "If-None-Match": alice_tag})).status == 200
