"""The API surface of preemption (CONTRACT section 9): a session's `preemptible` (create field,
defaults per type, shown with `priority`), the preemption keys of status_info passed through, and
a scaling group's `preemption` (create, partial PATCH merged over the stored object, every
refusal a 4xx that writes nothing, an audit row per write)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from sqlalchemy import select, update

from sokovan.db.models import AuditLog, Keypair, ScalingGroup, Session, User
from sokovan.manager.context import ManagerContext
from sokovan.manager.controller.replica_sessions import ControllerReplicas
from sokovan.manager.controller.scheduling_controller import SchedulingController
from sokovan.manager.repositories.admin import merged_preemption
from sokovan.orchestrator.deployment.replicas import ReplicaSpec
from tests.api.conftest import Api
from tests.api.deployment_helpers import add_model_agent, created
from tests.api.test_auth_and_errors import assert_problem

OFF = {"mode": "off", "grace_period": 30}


def _body(session_type: str, preemptible: object) -> dict[str, Any]:
    body: dict[str, Any] = {"type": session_type}
    if session_type != "batch":
        body["command"] = None
    if preemptible is not ...:
        body["preemptible"] = preemptible
    return body


async def _stored_preemptible(api: Api, session_id: str) -> bool:
    async with api.engine.connect() as conn:
        value: bool = (
            await conn.execute(select(Session.preemptible).where(Session.id == uuid.UUID(session_id)))
        ).scalar_one()
    return value


# -- sessions --------------------------------------------------------------------------------------

# (type, preemptible given (... = left out), expected)
PREEMPTIBLE: list[tuple[str, object, bool]] = [
    ("batch", ..., True),
    ("interactive", ..., False),
    ("inference", ..., False),
    ("batch", None, True),  # null reads as left out
    ("interactive", None, False),
    ("batch", False, False),
    ("batch", True, True),
    ("interactive", True, True),
    ("inference", True, True),
    ("interactive", False, False),
]


@pytest.mark.parametrize(("session_type", "given", "expected"), PREEMPTIBLE)
async def test_preemptible_defaults_per_type_and_as_given(
    api: Api, session_type: str, given: object, expected: bool
) -> None:
    resp = await api.create(api.alice, **_body(session_type, given))
    assert resp.status == 201, await resp.text()
    session = await resp.json()
    assert session["preemptible"] is expected
    assert await _stored_preemptible(api, session["id"]) is expected
    got = await (await api.client.get(f"/v2/sessions/{session['id']}", headers=api.alice)).json()
    assert (got["preemptible"], got["priority"]) == (expected, 10)


async def test_priority_and_preemptible_are_shown_on_read_and_list(api: Api) -> None:
    urgent = await (await api.create(api.admin, priority=50, preemptible=False)).json()
    batch = await (await api.create(api.alice, priority=5)).json()
    got = await (await api.client.get(f"/v2/sessions/{urgent['id']}", headers=api.admin)).json()
    assert (got["priority"], got["preemptible"]) == (50, False)
    page = await (await api.client.get("/v2/sessions", headers=api.admin)).json()
    shown = {s["id"]: (s["priority"], s["preemptible"]) for s in page["items"]}
    assert shown == {urgent["id"]: (50, False), batch["id"]: (5, True)}


async def test_the_audit_row_records_priority_and_preemptible(api: Api) -> None:
    sid = (await (await api.create(api.alice, preemptible=False)).json())["id"]
    async with api.engine.connect() as conn:
        detail = (
            await conn.execute(
                select(AuditLog.detail).where(AuditLog.action == "session.create", AuditLog.target == sid)
            )
        ).scalar_one()
    assert (detail["priority"], detail["preemptible"]) == (10, False)


BAD_PREEMPTIBLE: list[object] = ["yes", "true", 1, 0, [], {}]


@pytest.mark.parametrize("value", BAD_PREEMPTIBLE, ids=[repr(v) for v in BAD_PREEMPTIBLE])
async def test_a_non_boolean_preemptible_is_422_and_writes_nothing(api: Api, value: object) -> None:
    before = await api.counts()
    body = await assert_problem(await api.create(api.alice, preemptible=value), 422)
    assert "preemptible" in json.dumps(body["errors"])
    dry = await api.client.post(
        "/v2/sessions?dry_run=true",
        json={"image": "python:3", "command": "true", "preemptible": value},
        headers=api.alice,
    )
    await assert_problem(dry, 422)
    assert await api.counts() == before


async def test_dry_run_takes_preemptible_and_writes_nothing(api: Api) -> None:
    before = await api.counts()
    for value in (True, False):
        resp = await api.client.post(
            "/v2/sessions?dry_run=true",
            json={"image": "python:3", "command": "true", "preemptible": value},
            headers=api.alice,
        )
        assert resp.status == 200, await resp.text()
        answer = await resp.json()
        assert answer["placeable"] is True and len(answer["agents"]) == 1
    assert await api.counts() == before


PREEMPTION_INFO = {
    "cause": "PREEMPTED",
    "message": "preempted by session x (priority 50)",
    "preempted_by": "0b8f5a4e-1d3c-4a61-9a39-9d9f1f0b7c11",
    "preempt_mode": "requeue",
    "kill_grace": 30.0,
    "preempted_count": 2,
    "nominated_agents": ["agent-1", "agent-2"],
    "nominated_until": "2026-01-01T00:01:30Z",
    "preempts": ["5a0b3f7e-2c1d-4f6b-8e9a-0c1d2e3f4a5b"],
    "pending_reason": "waiting for preempted sessions 5a0b3f7e to end on agent agent-1",
}


async def test_status_info_preemption_keys_pass_through_untouched(api: Api) -> None:
    sid = (await (await api.create(api.alice)).json())["id"]
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Session).where(Session.id == uuid.UUID(sid)).values(status_info=PREEMPTION_INFO)
        )
    got = await (await api.client.get(f"/v2/sessions/{sid}", headers=api.alice)).json()
    assert got["status_info"] == PREEMPTION_INFO
    page = await (await api.client.get("/v2/sessions", headers=api.alice)).json()
    assert [s["status_info"] for s in page["items"]] == [PREEMPTION_INFO]


async def test_deployment_replicas_are_never_preemptible(api: Api, ctx: ManagerContext) -> None:
    await add_model_agent(api)
    deployment = await created(api, api.alice)
    async with api.engine.connect() as conn:
        access_key = (
            await conn.execute(
                select(Keypair.access_key).join(User, User.id == Keypair.user_id).where(User.name == "alice")
            )
        ).scalar_one()
    replicas = ControllerReplicas(SchedulingController(ctx), api.engine)
    sid = await replicas.ensure(
        ReplicaSpec(
            access_key=access_key,
            deployment_id=uuid.UUID(deployment["id"]),
            name="web-r1",
            image="python:3",
            command="python3 -m http.server $PORT",
            resources={"cpu": 1, "mem": "256m"},
            scaling_group="default",
            creation_id=f"route-{uuid.uuid4()}",
        )
    )
    assert await _stored_preemptible(api, str(sid)) is False


# -- scaling groups --------------------------------------------------------------------------------


async def _stored_group(api: Api, name: str) -> Any:
    async with api.engine.connect() as conn:
        return (
            await conn.execute(select(ScalingGroup.preemption).where(ScalingGroup.name == name))
        ).scalar_one()


async def _audit_details(api: Api, action: str) -> list[Any]:
    async with api.engine.connect() as conn:
        rows = await conn.execute(
            select(AuditLog.detail).where(AuditLog.action == action).order_by(AuditLog.id)
        )
        return list(rows.scalars())


async def test_default_preemption_is_off_with_a_30_s_grace(api: Api) -> None:
    got = await (await api.client.get("/v2/scaling-groups/default", headers=api.alice)).json()
    assert got["preemption"] == OFF
    resp = await api.client.post("/v2/scaling-groups", json={"name": "plain"}, headers=api.admin)
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["preemption"] == OFF
    assert await _stored_group(api, "plain") == OFF
    listed = await (await api.client.get("/v2/scaling-groups", headers=api.alice)).json()
    assert [g["preemption"] for g in listed["items"]] == [OFF, OFF]


async def test_create_with_preemption_fills_left_out_keys(api: Api) -> None:
    full = {"mode": "requeue", "grace_period": 0}
    resp = await api.client.post(
        "/v2/scaling-groups", json={"name": "urgent", "preemption": full}, headers=api.admin
    )
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["preemption"] == full
    resp = await api.client.post(
        "/v2/scaling-groups", json={"name": "batchy", "preemption": {"mode": "terminate"}}, headers=api.admin
    )
    assert (await resp.json())["preemption"] == {"mode": "terminate", "grace_period": 30}
    assert await _stored_group(api, "batchy") == {"mode": "terminate", "grace_period": 30}
    created_rows = await _audit_details(api, "scaling_group.create")
    assert [d["preemption"] for d in created_rows] == [full, {"mode": "terminate", "grace_period": 30}]


async def test_patch_merges_the_keys_given_over_the_stored_object(api: Api) -> None:
    path = "/v2/scaling-groups/default"
    steps: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"mode": "terminate"}, {"mode": "terminate", "grace_period": 30}),
        ({"grace_period": 3600}, {"mode": "terminate", "grace_period": 3600}),
        ({"mode": "requeue", "grace_period": 2.5}, {"mode": "requeue", "grace_period": 2.5}),
        ({}, {"mode": "requeue", "grace_period": 2.5}),
        ({"mode": "off"}, {"mode": "off", "grace_period": 2.5}),
    ]
    for given, expected in steps:
        resp = await api.client.patch(path, json={"preemption": given}, headers=api.admin)
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        assert body["preemption"] == expected, given
        assert body["scheduler"] == "fifo"  # the other fields are untouched
        assert await _stored_group(api, "default") == expected
    other = await api.client.patch(path, json={"scheduler": "lifo"}, headers=api.admin)
    assert (await other.json())["preemption"] == {"mode": "off", "grace_period": 2.5}
    updates = await _audit_details(api, "scaling_group.update")
    assert [d.get("preemption") for d in updates] == [e for _, e in steps] + [None]


async def test_patch_of_a_missing_group_is_404(api: Api) -> None:
    resp = await api.client.patch(
        "/v2/scaling-groups/nowhere", json={"preemption": {"mode": "terminate"}}, headers=api.admin
    )
    await assert_problem(resp, 404)


async def test_only_admins_set_preemption(api: Api) -> None:
    before = await api.counts()
    body = {"preemption": {"mode": "terminate"}}
    await assert_problem(
        await api.client.patch("/v2/scaling-groups/default", json=body, headers=api.alice), 403
    )
    await assert_problem(
        await api.client.post("/v2/scaling-groups", json={"name": "x", **body}, headers=api.alice), 403
    )
    assert await api.counts() == before
    assert await _stored_group(api, "default") == OFF


BAD_PREEMPTION: list[tuple[str, object]] = [
    ("unknown-mode", {"mode": "cancel"}),
    ("mode-in-capitals", {"mode": "TERMINATE"}),
    ("mode-not-a-string", {"mode": 1}),
    ("mode-null", {"mode": None}),
    ("negative-grace", {"grace_period": -1}),
    ("grace-past-an-hour", {"grace_period": 3600.5}),
    ("huge-grace", {"grace_period": 1e300}),
    ("grace-as-string", {"grace_period": "30"}),
    ("grace-as-bool", {"grace_period": True}),
    ("grace-null", {"grace_period": None}),
    ("unknown-key", {"mode": "terminate", "grace": 5}),
    ("not-an-object", "terminate"),
    ("a-list", [{"mode": "terminate"}]),
    ("null", None),
]


@pytest.mark.parametrize(("case", "preemption"), BAD_PREEMPTION, ids=[b[0] for b in BAD_PREEMPTION])
async def test_bad_preemption_is_422_and_writes_nothing(api: Api, case: str, preemption: object) -> None:
    await api.client.patch(
        "/v2/scaling-groups/default", json={"preemption": {"mode": "terminate"}}, headers=api.admin
    )
    stored = await _stored_group(api, "default")
    before = await api.counts()
    resp = await api.client.post(
        "/v2/scaling-groups", json={"name": "x", "preemption": preemption}, headers=api.admin
    )
    body = await assert_problem(resp, 422)
    assert "preemption" in json.dumps(body["errors"])
    resp = await api.client.patch(
        "/v2/scaling-groups/default", json={"preemption": preemption}, headers=api.admin
    )
    await assert_problem(resp, 422)
    assert await api.counts() == before
    assert await _stored_group(api, "default") == stored
    await assert_problem(await api.client.get("/v2/scaling-groups/x", headers=api.admin), 404)


NON_FINITE = [b'{"preemption": {"grace_period": NaN}}', b'{"preemption": {"grace_period": 1e400}}']


@pytest.mark.parametrize("raw", NON_FINITE, ids=["NaN", "1e400"])
async def test_a_non_finite_grace_is_400_and_writes_nothing(api: Api, raw: bytes) -> None:
    before = await api.counts()
    headers = {**api.admin, "Content-Type": "application/json"}
    await assert_problem(await api.client.patch("/v2/scaling-groups/default", data=raw, headers=headers), 400)
    create = raw.replace(b"{", b'{"name": "x", ', 1)
    await assert_problem(await api.client.post("/v2/scaling-groups", data=create, headers=headers), 400)
    assert await api.counts() == before
    assert await _stored_group(api, "default") == OFF


async def test_a_stored_value_the_settings_refuse_reads_as_off(api: Api) -> None:
    """Written by hand in the database: shown as the scheduler reads it (off), and a PATCH merges
    over that default rather than over the broken object."""
    async with api.engine.begin() as conn:
        await conn.execute(
            update(ScalingGroup)
            .where(ScalingGroup.name == "default")
            .values(preemption={"mode": "sometimes", "grace_period": -4, "extra": 1})
        )
    got = await (await api.client.get("/v2/scaling-groups/default", headers=api.alice)).json()
    assert got["preemption"] == OFF
    resp = await api.client.patch(
        "/v2/scaling-groups/default", json={"preemption": {"grace_period": 5}}, headers=api.admin
    )
    assert (await resp.json())["preemption"] == {"mode": "off", "grace_period": 5}
    assert await _stored_group(api, "default") == {"mode": "off", "grace_period": 5}


# (stored, PATCH keys, result): the merge rule alone
MERGES: list[tuple[object, dict[str, Any], dict[str, Any]]] = [
    (OFF, {}, OFF),
    (OFF, {"mode": "requeue"}, {"mode": "requeue", "grace_period": 30}),
    ({"mode": "terminate", "grace_period": 5}, {"grace_period": 0}, {"mode": "terminate", "grace_period": 0}),
    ({"mode": "terminate", "grace_period": 5}, {"mode": "off"}, {"mode": "off", "grace_period": 5}),
    ({"mode": "bogus"}, {"grace_period": 7}, {"mode": "off", "grace_period": 7}),  # broken: from the default
    (None, {"mode": "terminate"}, {"mode": "terminate", "grace_period": 30}),
    ({}, {}, OFF),
]


@pytest.mark.parametrize(("stored", "given", "expected"), MERGES)
def test_merged_preemption(stored: object, given: dict[str, Any], expected: dict[str, Any]) -> None:
    assert merged_preemption(stored, given) == expected
