"""Reading, listing and terminating sessions; one user never sees another's."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select, update

from sokovan.db.models import Kernel, Session, SessionSchedulingHistory
from tests.api.conftest import Api, add_agent
from tests.api.test_auth_and_errors import assert_problem


async def _create(api: Api, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    resp = await api.create(headers, **body)
    assert resp.status == 201, await resp.text()
    data: dict[str, Any] = await resp.json()
    return data


async def test_other_users_session_is_404_for_every_verb(api: Api) -> None:
    sid = (await _create(api, api.alice))["id"]
    await assert_problem(await api.client.get(f"/v2/sessions/{sid}", headers=api.bob), 404)
    await assert_problem(await api.client.get(f"/v2/sessions/{sid}/history", headers=api.bob), 404)
    await assert_problem(await api.client.get(f"/v2/sessions/{sid}/logs", headers=api.bob), 404)
    await assert_problem(await api.client.delete(f"/v2/sessions/{sid}", headers=api.bob), 404)
    got = await api.client.get(f"/v2/sessions/{sid}", headers=api.alice)
    assert (await got.json())["status"] == "PENDING"  # bob's DELETE did nothing
    assert (await api.client.get(f"/v2/sessions/{sid}", headers=api.admin)).status == 200


async def test_list_is_scoped_filtered_and_paginated(api: Api) -> None:
    mine = [(await _create(api, api.alice, name=f"a{i}"))["id"] for i in range(5)]
    await _create(api, api.bob, name="b0")
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = "limit=2" + (f"&cursor={cursor}" if cursor else "")
        body = await (await api.client.get(f"/v2/sessions?{query}", headers=api.alice)).json()
        seen += [i["id"] for i in body["items"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(mine))  # newest first, nothing twice, nothing of bob's
    assert pages == 3
    everyone = await (await api.client.get("/v2/sessions", headers=api.admin)).json()
    assert len(everyone["items"]) == 6
    bobs = await (await api.client.get("/v2/sessions?owner=bob", headers=api.admin)).json()
    assert [i["name"] for i in bobs["items"]] == ["b0"]
    await assert_problem(await api.client.get("/v2/sessions?owner=bob", headers=api.alice), 403)
    pending = await api.client.get("/v2/sessions?status=PENDING,RUNNING&type=batch", headers=api.alice)
    assert len((await pending.json())["items"]) == 5
    none = await api.client.get("/v2/sessions?status=RUNNING", headers=api.alice)
    assert (await none.json()) == {"items": [], "next_cursor": None}


async def test_terminate_pending_cancels(api: Api) -> None:
    sid = (await _create(api, api.alice, cluster_size=2))["id"]
    resp = await api.client.delete(f"/v2/sessions/{sid}", headers=api.alice)
    assert resp.status == 202
    body = await resp.json()
    assert body["status"] == "CANCELLED"
    assert body["result"] is None
    assert body["status_info"]["cause"] == "USER_CANCELLED"
    assert body["terminated_at"] is not None
    assert [k["status"] for k in body["kernels"]] == ["CANCELLED", "CANCELLED"]
    history = await (await api.client.get(f"/v2/sessions/{sid}/history", headers=api.alice)).json()
    assert [(h["handler"], h["from_status"], h["to_status"]) for h in history["items"]] == [
        ("api.create", None, "PENDING"),
        ("api.terminate", "PENDING", "CANCELLED"),
    ]
    again = await api.client.delete(f"/v2/sessions/{sid}", headers=api.alice)
    assert again.status == 202
    assert (await again.json())["status"] == "CANCELLED"
    history = await (await api.client.get(f"/v2/sessions/{sid}/history", headers=api.alice)).json()
    assert len(history["items"]) == 2


async def test_terminate_running_goes_terminating(api: Api) -> None:
    sid = (await _create(api, api.alice))["id"]
    async with api.engine.begin() as conn:
        await conn.execute(update(Session).where(Session.id == sid).values(status="RUNNING"))
        await conn.execute(
            update(Kernel).where(Kernel.session_id == sid).values(status="RUNNING", agent_id="agent-1")
        )
    resp = await api.client.delete(f"/v2/sessions/{sid}", headers=api.alice)
    assert resp.status == 202
    body = await resp.json()
    assert body["status"] == "TERMINATING"
    assert body["status_info"] == {
        "cause": "USER_CANCELLED",
        "message": "terminated by user",
        "forced": False,
    }
    assert body["kernels"][0]["status"] == "RUNNING"  # the orchestrator destroys them
    resp = await api.client.delete(f"/v2/sessions/{sid}?forced=true", headers=api.alice)
    assert resp.status == 202
    body = await resp.json()
    assert (body["status"], body["status_info"]["forced"]) == ("TERMINATING", True)
    resp = await api.client.delete(f"/v2/sessions/{sid}?forced=true", headers=api.alice)
    assert resp.status == 202
    async with api.engine.connect() as conn:
        rows = (
            await conn.execute(
                select(SessionSchedulingHistory.from_status, SessionSchedulingHistory.to_status).order_by(
                    SessionSchedulingHistory.id
                )
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        (None, "PENDING"),  # the create
        ("RUNNING", "TERMINATING"),
        ("TERMINATING", "TERMINATING"),
    ]
    await assert_problem(await api.client.delete(f"/v2/sessions/{sid}?forced=maybe", headers=api.alice), 400)


async def test_history_pagination(api: Api) -> None:
    sid = (await _create(api, api.alice))["id"]
    async with api.engine.begin() as conn:
        await conn.execute(
            insert(SessionSchedulingHistory),
            [{"session_id": sid, "handler": f"h{i}", "result": "SUCCESS", "attempt": i} for i in range(5)],
        )
    got: list[str] = []
    cursor = None
    while True:
        query = "limit=2" + (f"&cursor={cursor}" if cursor else "")
        body = await (await api.client.get(f"/v2/sessions/{sid}/history?{query}", headers=api.alice)).json()
        got += [h["handler"] for h in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert got == ["api.create", *(f"h{i}" for i in range(5))]


async def test_logs_of_unreachable_agent_is_an_error_field(api: Api) -> None:
    await add_agent(api.engine, "agent-3", rpc_addr="127.0.0.1:9")
    sid = (await _create(api, api.alice, cluster_size=2))["id"]
    async with api.engine.begin() as conn:
        kernel_id = (
            await conn.execute(select(Kernel.id).where(Kernel.session_id == sid, Kernel.cluster_idx == 0))
        ).scalar_one()
        await conn.execute(update(Kernel).where(Kernel.id == kernel_id).values(agent_id="agent-3"))
    resp = await api.client.get(f"/v2/sessions/{sid}/logs", headers=api.alice)
    assert resp.status == 200
    items = (await resp.json())["items"]
    assert len(items) == 1  # the kernel without an agent has no logs to ask for
    assert items[0]["kernel_id"] == str(kernel_id)
    assert (items[0]["stdout"], items[0]["stderr"]) == ("", "")
    assert items[0]["error"]


async def test_retry_chain_walks_parents_and_children(api: Api) -> None:
    first = (await _create(api, api.alice, retry_policy={"max_retries": 2}))["id"]
    second = (await _create(api, api.alice))["id"]
    third = (await _create(api, api.alice))["id"]
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Session)
            .where(Session.id == second)
            .values(parent_session_id=first, retry_count=1, max_retries=2)
        )
        await conn.execute(
            update(Session)
            .where(Session.id == third)
            .values(parent_session_id=second, retry_count=2, max_retries=2)
        )
    for sid in (first, second, third):
        body = await (await api.client.get(f"/v2/sessions/{sid}", headers=api.alice)).json()
        assert body["retry_chain"] == [first, second, third]
    mid = await (await api.client.get(f"/v2/sessions/{second}", headers=api.alice)).json()
    assert mid["retry_state"] == "attempt 2 of 3"
    assert mid["parent_session_id"] == first
    assert mid["retry_child_id"] == third
