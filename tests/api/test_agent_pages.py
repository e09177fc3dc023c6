"""`GET /v2/agents` (`agent_snapshot`, `agent_pages`): the same page as the models give, a tag
that ignores heartbeats but nothing else; a calm fleet's pages read afresh (a change by hand is on
the next page); a busy fleet's served from the entries, what an event names on them before any
sweep, what has no event within a sweep, an action here on the very next page; every page read
afresh while there is no listener; pages and users kept apart."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from sqlalchemy import insert, update

from sokovan.bus.user_event_hub import HubUnavailable, UserEventHub
from sokovan.bus.user_events import UserEvent, UserEventPublisher
from sokovan.db.models import Agent, ScalingGroup
from sokovan.manager.api import agent_pages, agent_snapshot
from sokovan.manager.api.admin_schemas import AgentList, AgentOut
from sokovan.manager.api.agents import SNAPSHOT_KEY
from sokovan.manager.api.events import HUB_KEY
from sokovan.manager.repositories import agents_read
from tests.api.conftest import Api, add_agent
from tests.api.tenancy_helpers import place_kernels

WITHIN_S = 10.0  # the test's patience for what the follower does in the background


@pytest.fixture
def busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages served from the entries as soon as the follower is live, whatever the events' rate."""
    monkeypatch.setattr(agent_snapshot, "BUSY_EVENTS", 0)


async def _page(api: Api, headers: dict[str, str], query: str = "") -> tuple[int, str, Any]:
    resp = await api.client.get(f"/v2/agents{query}", headers=headers)
    body = await resp.json() if resp.status == 200 else None
    return resp.status, resp.headers.get("ETag", ""), body


async def _until(api: Api, shows: Callable[[dict[str, Any]], bool], query: str = "") -> tuple[str, Any]:
    """Pages until one `shows` what is wanted (its tag and body); fails after WITHIN_S."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WITHIN_S
    while True:
        status, tag, body = await _page(api, api.admin, query)
        assert status == 200
        if shows(body):
            return tag, body
        assert loop.time() < deadline, f"the page never showed it: {body}"
        await asyncio.sleep(0.05)


def _app(api: Api) -> web.Application:
    app = api.client.app
    assert isinstance(app, web.Application)
    return app


def _snapshot(api: Api) -> agent_snapshot.AgentSnapshot:
    return _app(api)[SNAPSHOT_KEY]


def _agent(body: dict[str, Any], agent_id: str) -> dict[str, Any]:
    return next(a for a in body["items"] if a["id"] == agent_id)


async def _afresh(api: Api) -> bytes:
    """The page as rendering every agent from its rows gives it (what a worker with no snapshot
    would serve)."""
    async with api.engine.connect() as conn:
        views = await agents_read.get_agents(conn, ["agent-1", "agent-2"])
    items = sorted((AgentOut.model_validate(v) for v in views), key=lambda a: a.id)
    return AgentList(items=items, next_cursor=None).model_dump_json().encode()


async def _following(api: Api) -> None:
    """A first page, then until the worker's snapshot follows the events."""
    await _page(api, api.admin)
    snapshot = _snapshot(api)
    for _ in range(200):
        if snapshot.live:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the snapshot never followed the events")


async def test_the_page_is_what_the_models_give_and_a_heartbeat_keeps_the_tag(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_pages, "BEAT_EPOCH_S", 1e9)  # no new window while the test runs
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
    # ...and one without it gets the fresh heartbeat (within a sweep), under the same weak tag.
    same_tag, fresh = await _until(api, lambda b: {a["heartbeat_seq"] for a in b["items"]} == {7})
    assert same_tag == tag
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
    await _until(api, lambda b: _agent(b, "agent-1")["heartbeat_seq"] == 42)
    body = await (await api.client.get("/v2/agents", headers=api.admin)).read()
    assert body == await _afresh(api)
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
    new_tag, _ = await _until(api, lambda b: _agent(b, "agent-2")["heartbeat_seq"] == 9)
    assert new_tag != tag
    patched = await api.client.get("/v2/agents", headers={**api.admin, "If-None-Match": tag})
    assert patched.status == 200
    body = await patched.read()
    assert body == await _afresh(api)
    two = next(a for a in json.loads(body)["items"] if a["id"] == "agent-2")
    assert (two["occupied_slots"]["cpu"], two["running_kernels"], two["heartbeat_seq"]) == ("3", 1, 9)


async def test_a_calm_fleets_page_is_read_afresh(api: Api) -> None:
    """With no stream of events, what changed (even by hand, with no event) is on the next page."""
    await _following(api)
    _, tag, _ = await _page(api, api.admin)
    created = await api.create(api.alice, resources={"cpu": 2, "mem": "1g"})
    await place_kernels(api.engine, str((await created.json())["id"]), "agent-1", "RUNNING")
    _, placed_tag, body = await _page(api, api.admin)
    assert placed_tag != tag
    assert (_agent(body, "agent-1")["running_kernels"], _agent(body, "agent-1")["occupied_slots"]["cpu"]) == (
        1,
        "2",
    )

    async with api.engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "agent-2").values(schedulable=False))
    _, held_tag, body = await _page(api, api.admin)
    assert held_tag != placed_tag and _agent(body, "agent-2")["schedulable"] is False

    await add_agent(api.engine, "agent-3")
    _, _, body = await _page(api, api.admin)
    assert [a["id"] for a in body["items"]] == ["agent-1", "agent-2", "agent-3"]


@pytest.mark.usefixtures("busy")
async def test_a_busy_fleets_page_gets_what_has_no_event_within_a_sweep(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_snapshot, "SWEEP_S", 0.2)
    await _following(api)
    async with api.engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "agent-2").values(heartbeat_seq=11))
    await add_agent(api.engine, "agent-3")
    _, body = await _until(api, lambda b: len(b["items"]) == 3)
    assert _agent(body, "agent-2")["heartbeat_seq"] == 11


@pytest.mark.usefixtures("busy")
async def test_an_event_naming_an_agent_puts_it_on_a_busy_page_before_any_sweep(
    api: Api, publisher: UserEventPublisher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_snapshot, "SWEEP_S", 3600.0)  # no sweep after the first
    await _following(api)
    created = await api.create(api.alice, resources={"cpu": 3, "mem": "1g"})
    sid = str((await created.json())["id"])
    await place_kernels(api.engine, sid, "agent-2", "RUNNING")
    await asyncio.sleep(0.5)
    _, _, body = await _page(api, api.admin)
    assert _agent(body, "agent-2")["running_kernels"] == 0  # served from the entries: nothing told them
    event = UserEvent(name="kernel.status", session_id=sid, agent_id="agent-2", to_status="RUNNING")
    await publisher.publish_many([event])
    _, body = await _until(api, lambda b: _agent(b, "agent-2")["running_kernels"] == 1)
    assert _agent(body, "agent-2")["occupied_slots"]["cpu"] == "3"


@pytest.mark.usefixtures("busy")
async def test_an_action_here_is_on_the_next_busy_page(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_snapshot, "SWEEP_S", 3600.0)
    await _following(api)
    drained = await api.client.post("/v2/agents/agent-1/drain", json={"reason": "test"}, headers=api.admin)
    assert drained.status == 200
    _, _, body = await _page(api, api.admin, "?status=draining,drained")
    assert [a["id"] for a in body["items"]] == ["agent-1"]


async def test_without_a_listener_every_page_reads_the_fleet(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def unavailable(self: UserEventHub, *args: Any, **kwargs: Any) -> None:
        raise HubUnavailable("Redis is away")

    monkeypatch.setattr(UserEventHub, "open", unavailable)
    await _page(api, api.admin)
    async with api.engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "agent-2").values(heartbeat_seq=5))
    _, _, body = await _page(api, api.admin)
    assert _agent(body, "agent-2")["heartbeat_seq"] == 5
    assert not _snapshot(api).live


async def test_the_follower_stops_once_no_page_is_asked(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_snapshot, "IDLE_S", 0.5)
    await _following(api)
    hub = _app(api)[HUB_KEY]
    assert hub.listeners == 1
    for _ in range(100):
        if hub.listeners == 0:
            break
        await asyncio.sleep(0.05)
    assert hub.listeners == 0 and not _snapshot(api).live
    # The next page starts it again, and is served afresh meanwhile.
    async with api.engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "agent-1").values(heartbeat_seq=3))
    _, _, body = await _page(api, api.admin)
    assert _agent(body, "agent-1")["heartbeat_seq"] == 3


async def test_pages_filters_and_bad_cursors(api: Api) -> None:
    async with api.engine.begin() as conn:
        await conn.execute(insert(ScalingGroup).values(name="gpu"))
    await add_agent(api.engine, "agent-3", status="DRAINING", scaling_group="gpu")
    await _until(api, lambda b: len(b["items"]) == 3)
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
    await _until(api, lambda b: len(b["items"]) == 3)
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
