"""POST /v2/agents/{id}/drain|undrain|disable|enable and GET /v2/agents/{id}/history: every
(status, action) pair against real PostgreSQL, what each action does to kernels and sessions, and
who may act."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from sqlalchemy import select, text, update

from sokovan.bus.hints import hint_channel
from sokovan.bus.user_events import user_events_channel
from sokovan.common.types import AgentStatus
from sokovan.db.models import Agent, AgentHistory, AuditLog, Kernel, Keypair, Session, User
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api, add_agent
from tests.api.tenancy_helpers import place_kernels
from tests.api.test_auth_and_errors import assert_problem

ACTIONS = ("drain", "undrain", "disable", "enable")
# (status, action, body) → status after; `disabled` marks a DOWN agent an operator disabled.
LEGAL: dict[tuple[str, str, bool], str] = {
    ("READY", "drain", False): "DRAINING",
    ("DEGRADED", "drain", False): "DRAINING",
    ("READY", "drain", True): "DRAINING",
    ("DEGRADED", "drain", True): "DRAINING",
    ("DRAINING", "drain", True): "DRAINING",  # an escalation
    ("DRAINING", "undrain", False): "READY",
    ("DRAINED", "undrain", False): "READY",
    **{(s.value, "disable", False): "DOWN" for s in AgentStatus},  # DOWN: only disabled (not yet)
    ("DOWN", "enable", False): "BOOTING",
    ("FAILED", "enable", False): "BOOTING",
}
ILLEGAL = [
    (s.value, action, urgent)
    for s in AgentStatus
    for action in ACTIONS
    for urgent in ((False, True) if action == "drain" else (False,))
    if (s.value, action, urgent) not in LEGAL
]


async def _post(api: Api, agent_id: str, action: str, body: Any = None, headers: Any = None) -> Any:
    return await api.client.post(
        f"/v2/agents/{agent_id}/{action}", json=body, headers=api.admin if headers is None else headers
    )


async def _admin_key(api: Api) -> str:
    async with api.engine.connect() as conn:
        query = select(Keypair.access_key).join(User, User.id == Keypair.user_id).where(User.name == "admin")
        return str((await conn.execute(query)).scalar_one())


async def _audit(api: Api) -> list[tuple[str | None, str, str | None, dict[str, Any]]]:
    async with api.engine.connect() as conn:
        rows = await conn.execute(
            select(AuditLog).where(AuditLog.action.like("agent.%")).order_by(AuditLog.id)
        )
        return [(r.actor, r.action, r.target, r.detail) for r in rows]


async def _running_session(api: Api, agent_id: str) -> uuid.UUID:
    """A RUNNING session of alice's with its kernel on `agent_id`."""
    resp = await api.create(api.alice, resources={"cpu": 1, "mem": "256m"})
    assert resp.status == 201, await resp.text()
    sid = uuid.UUID((await resp.json())["id"])
    await place_kernels(api.engine, str(sid), agent_id, "RUNNING")
    async with api.engine.begin() as conn:
        await conn.execute(update(Session).where(Session.id == sid).values(status="RUNNING"))
    return sid


async def _session(api: Api, sid: uuid.UUID) -> Any:
    async with api.engine.connect() as conn:
        return (
            await conn.execute(select(Session.status, Session.status_info).where(Session.id == sid))
        ).one()


@pytest.mark.parametrize(("status", "action", "urgent"), sorted(LEGAL))
async def test_every_legal_action(api: Api, status: str, action: str, urgent: bool) -> None:
    await add_agent(api.engine, "n-1", status=status, boot_failures=2)
    body = {"reason": "maintenance", **({"urgent": True} if urgent else {})}
    resp = await _post(api, "n-1", action, body)
    assert resp.status == 200, await resp.text()
    agent = await resp.json()
    assert agent["id"] == "n-1" and agent["status"] == LEGAL[(status, action, urgent)]
    assert agent["disabled"] is (action == "disable")
    assert agent["schedulable"] is (agent["status"] == "READY")
    assert agent["status_info"] == {
        "reason": "maintenance",
        "handler": f"api.{action}",
        "by": await _admin_key(api),
    }
    if action == "enable":
        async with api.engine.connect() as conn:
            assert await conn.scalar(select(Agent.boot_failures).where(Agent.id == "n-1")) == 0
    history = await (await api.client.get("/v2/agents/n-1/history", headers=api.admin)).json()
    assert history["items"][0] == {
        "from": status,
        "to": agent["status"],
        "handler": f"api.{action}",
        "result": "SUCCESS",
        "reason": "maintenance",
        "actor": await _admin_key(api),
        "at": history["items"][0]["at"],
    }
    expected_detail = {"reason": "maintenance", **({"urgent": urgent} if action == "drain" else {})}
    if urgent:
        expected_detail["sessions_terminated"] = 0
    assert await _audit(api) == [(await _admin_key(api), f"agent.{action}", "n-1", expected_detail)]


@pytest.mark.parametrize(("status", "action", "urgent"), ILLEGAL)
async def test_every_illegal_action_is_409_naming_the_state(
    api: Api, status: str, action: str, urgent: bool
) -> None:
    await add_agent(api.engine, "n-1", status=status, disabled=status == "DOWN")
    body = await assert_problem(await _post(api, "n-1", action, {"urgent": True} if urgent else None), 409)
    assert body["agent_status"] == status
    assert f"agent n-1 is {status}" in str(body["detail"])
    async with api.engine.connect() as conn:
        assert (await conn.execute(select(AgentHistory.id))).first() is None
    assert await _audit(api) == []


async def test_the_conflict_says_what_the_action_needs(api: Api) -> None:
    await add_agent(api.engine, "n-1", status="DRAINED")
    body = await assert_problem(await _post(api, "n-1", "drain"), 409)
    assert body["detail"] == "agent n-1 is DRAINED; drain needs READY or DEGRADED"
    assert body["type"].endswith("/agent-state-conflict")
    body = await assert_problem(await _post(api, "n-1", "drain", {"urgent": True}), 409)
    assert body["detail"] == "agent n-1 is DRAINED; urgent drain needs READY, DEGRADED or DRAINING"


async def test_admins_only_unknown_agents_and_bad_bodies(api: Api) -> None:
    for action in ACTIONS:
        await assert_problem(await _post(api, "agent-1", action, headers=api.alice), 403)
        await assert_problem(await _post(api, "nope", action), 404)
        await assert_problem(await _post(api, "agent-1", action, headers={}), 401)
        await assert_problem(await _post(api, "agent-1", action, {"reason": "x", "force": True}), 422)
        await assert_problem(await _post(api, "agent-1", action, {"reason": ""}), 422)
        malformed = await api.client.post(
            f"/v2/agents/agent-1/{action}",
            data="{no",
            headers={**api.admin, "Content-Type": "application/json"},
        )
        await assert_problem(malformed, 400)
    await assert_problem(await _post(api, "agent-1", "drain", {"urgent": "maybe"}), 422)
    await assert_problem(await api.client.get("/v2/agents/agent-1/history", headers=api.alice), 403)
    await assert_problem(await api.client.get("/v2/agents/nope/history", headers=api.admin), 404)
    await assert_problem(
        await api.client.get("/v2/agents/agent-1/history?cursor=%%%", headers=api.admin), 400
    )
    agent = await (await api.client.get("/v2/agents/agent-1", headers=api.alice)).json()
    assert agent["status"] == "READY" and await _audit(api) == []


async def test_disable_ends_the_agents_kernels_and_is_idempotent_only_once(api: Api) -> None:
    sid = await _running_session(api, "agent-1")
    other = await _running_session(api, "agent-2")
    resp = await _post(api, "agent-1", "disable", {"reason": "bad DIMM"})
    assert resp.status == 200, await resp.text()
    agent = await resp.json()
    assert (agent["status"], agent["disabled"], agent["schedulable"], agent["running_kernels"]) == (
        "DOWN",
        True,
        False,
        0,
    )
    async with api.engine.connect() as conn:
        kernels = (await conn.execute(select(Kernel.session_id, Kernel.status, Kernel.status_info))).all()
    by_session = {k.session_id: k for k in kernels}
    assert by_session[sid].status == "ERROR" and by_session[sid].status_info["cause"] == "AGENT_TRANSIENT"
    assert "bad DIMM" in by_session[sid].status_info["message"]
    assert by_session[other].status == "RUNNING"
    again = await assert_problem(await _post(api, "agent-1", "disable"), 409)
    assert again["agent_status"] == "DOWN" and "already disabled" in str(again["detail"])
    enabled = await (await _post(api, "agent-1", "enable")).json()
    assert (enabled["status"], enabled["disabled"]) == ("BOOTING", False)


async def test_disable_of_a_down_agent_only_marks_it(api: Api) -> None:
    await add_agent(api.engine, "n-1", status="DOWN")
    before = await (await api.client.get("/v2/agents/n-1", headers=api.admin)).json()
    agent = await (await _post(api, "n-1", "disable")).json()
    assert (agent["status"], agent["disabled"]) == ("DOWN", True)
    assert agent["status_changed_at"] == before["status_changed_at"]
    history = await (await api.client.get("/v2/agents/n-1/history", headers=api.admin)).json()
    assert [(h["from"], h["to"], h["reason"]) for h in history["items"]] == [
        ("DOWN", "DOWN", f"disable by {await _admin_key(api)}")
    ]


async def test_urgent_drain_terminates_its_sessions_with_node_drained(api: Api) -> None:
    first, second = await _running_session(api, "agent-1"), await _running_session(api, "agent-1")
    elsewhere = await _running_session(api, "agent-2")
    plain = await (await _post(api, "agent-1", "drain", {"reason": "upgrade"})).json()
    assert (plain["status"], plain["schedulable"]) == ("DRAINING", False)
    assert (await _session(api, first)).status == "RUNNING"  # a plain drain lets them finish
    resp = await _post(api, "agent-1", "drain", {"urgent": True, "reason": "PSU failing"})
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["status"] == "DRAINING"
    for sid in (first, second):
        status, info = await _session(api, sid)
        assert status == "TERMINATING" and info["cause"] == "NODE_DRAINED"
        assert info["message"] == "agent agent-1 was drained urgently: PSU failing"
    assert (await _session(api, elsewhere)).status == "RUNNING"
    history = await (await api.client.get(f"/v2/sessions/{first}/history", headers=api.admin)).json()
    assert history["items"][-1]["handler"] == "api.drain"
    audit = await _audit(api)
    assert [a[3] for a in audit] == [
        {"reason": "upgrade", "urgent": False},
        {"reason": "PSU failing", "urgent": True, "sessions_terminated": 2},
    ]
    agent_history = await (await api.client.get("/v2/agents/agent-1/history", headers=api.admin)).json()
    assert [(h["from"], h["to"], h["reason"]) for h in agent_history["items"]] == [
        ("DRAINING", "DRAINING", "PSU failing"),
        ("READY", "DRAINING", "upgrade"),
    ]


async def test_history_pages_newest_first(api: Api) -> None:
    for action in ("drain", "undrain", "disable", "enable"):
        assert (await _post(api, "agent-1", action, {"reason": action})).status == 200
    first = await (await api.client.get("/v2/agents/agent-1/history?limit=3", headers=api.admin)).json()
    assert [h["reason"] for h in first["items"]] == ["enable", "disable", "undrain"]
    rest = await (
        await api.client.get(
            f"/v2/agents/agent-1/history?limit=3&cursor={first['next_cursor']}", headers=api.admin
        )
    ).json()
    assert [h["reason"] for h in rest["items"]] == ["drain"] and rest["next_cursor"] is None


async def test_actions_hint_the_scheduler_and_publish_agent_events(api: Api, ctx: ManagerContext) -> None:
    pubsub = ctx.redis.pubsub()
    prefix = ctx.settings.etcd_prefix
    await pubsub.subscribe(hint_channel(prefix), user_events_channel(prefix))
    try:
        assert (await _post(api, "agent-1", "drain", {"reason": "r"})).status == 200
        seen: list[tuple[str, Any]] = []
        async with asyncio.timeout(5):
            while not (
                {"schedule", "node"} <= {d for c, d in seen if c == "hints"}
                and any(c == "events" for c, _ in seen)
            ):
                msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if msg is not None:
                    channel = msg["channel"].decode()
                    data = msg["data"].decode()
                    seen.append(
                        ("hints", data) if channel == hint_channel(prefix) else ("events", json.loads(data))
                    )
        event = next(d for c, d in seen if c == "events")
        assert (event["name"], event["agent_id"], event["from"], event["to"]) == (
            "agent.status",
            "agent-1",
            "READY",
            "DRAINING",
        )
    finally:
        await pubsub.unsubscribe()
        await pubsub.aclose()  # type: ignore[no-untyped-call]


async def _wait_for_lock_waiter(api: Api) -> None:
    async with asyncio.timeout(10):
        while True:
            async with api.engine.connect() as conn:
                waiting = await conn.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock'"
                    )
                )
            if waiting:
                return
            await asyncio.sleep(0.02)


@pytest.mark.parametrize(
    ("moved_to", "code", "final"), [("DEGRADED", 200, "DRAINING"), ("DRAINED", 409, "DRAINED")]
)
async def test_an_agent_that_moves_under_the_action_is_planned_again(
    api: Api, moved_to: str, code: int, final: str
) -> None:
    """The agent moves between the action's read and its guarded write: the action reads again
    and applies to what is there now (or is refused, naming it)."""
    async with api.engine.connect() as holder:
        tx = await holder.begin()
        await holder.execute(text("SELECT id FROM agents WHERE id = 'agent-1' FOR UPDATE"))
        action = asyncio.create_task(_post(api, "agent-1", "drain"))
        await _wait_for_lock_waiter(api)
        await holder.execute(text("UPDATE agents SET status = :s WHERE id = 'agent-1'"), {"s": moved_to})
        await tx.commit()
    resp = await action
    assert resp.status == code, await resp.text()
    body = await resp.json(content_type=None)
    assert (body.get("status") if code == 200 else body["agent_status"]) == final
