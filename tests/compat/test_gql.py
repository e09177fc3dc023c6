"""`POST /admin/gql` with the queries Backend.AI's client 26.9 sends, built as it builds them
(`ai.backend.client.pagination.execute_paginated_query`, `cli/admin/session.py`, `func/keypair.py`)
with the field references of its `output/fields.py`."""

from __future__ import annotations

import json
import textwrap
import uuid
from typing import Any

from sqlalchemy import update

from sokovan.db.models import Session
from tests.api.conftest import Api
from tests.api.tenancy_helpers import place_kernels

# `KeyPair(access_key).info()`, which `backend.ai ps` asks first to learn whether it is an admin
KEYPAIR_INFO = "query { keypair { $fields } }".replace(
    "$fields", "user_id access_key secret_key is_active is_admin"
)
# `backend.ai admin keypair info`
KEYPAIR_ADMIN_INFO = "query { keypair { $fields } }".replace(
    "$fields",
    "user_id user_info { full_name } access_key secret_key is_active is_admin created_at last_used "
    "resource_policy rate_limit concurrency_used",
)
# `backend.ai ps` (`--detail` adds the last three; `access_key` only for an admin)
PS_ADMIN = (
    "name access_key priority id group_name type image status status_info status_changed result "
    "tag created_at occupying_slots"
).split()
PS_USER = [f for f in PS_ADMIN if f != "access_key"]
ACTIVE = "PENDING,SCHEDULED,PULLING,PREPARED,PREPARING,CREATING,RUNNING,RUNNING_DEGRADED,TERMINATING,ERROR"
RUNNING = "CREATING,RUNNING,RUNNING_DEGRADED"
DEAD = "CANCELLED,TERMINATED"
ALL = (
    "PENDING,SCHEDULED,PULLING,PREPARED,PREPARING,CREATING,RUNNING,RESTARTING,RUNNING_DEGRADED,"
    "TERMINATING,TERMINATED,ERROR,CANCELLED"
)
CONTAINERS = (
    "containers { id cluster_role cluster_idx cluster_hostname session_id image registry status "
    "status_info status_data status_changed agent container_id resource_opts occupied_slots "
    "preopen_ports live_stat last_stat id }"
)
# `backend.ai session info SESSID`
INFO_FIELDS = (
    "name priority id main_kernel_id image tag created_at terminated_at status status_info status_data "
    f"occupying_slots idle_checks {CONTAINERS} dependencies {{ name id }}"
)
INFO = "query($id: UUID!) {  compute_session(id: $id) {    $fields  }}".replace("$fields", INFO_FIELDS)
INFO_KEYS = [*INFO_FIELDS.split(" containers ")[0].split(), "containers", "dependencies"]


def session_list(
    fields: list[str],
    *,
    status: str | None = ACTIVE,
    access_key: str | None = None,
    limit: int = 20,
    offset: int = 0,
    order: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """`ComputeSession.paginated_list(...)`: the query and variables the client sends."""
    variables: dict[str, tuple[Any, str]] = {
        "status": (status, "String"),
        "access_key": (access_key, "String"),
        "filter": (None, "String"),
        "order": (order, "String"),
    }
    query = """
    query($limit:Int!, $offset:Int!, $var_decls) {
      $root_field(
          limit:$limit, offset:$offset, $var_args) {
        items { $fields }
        total_count
      }
    }"""
    query = query.replace("$root_field", "compute_session_list")
    query = query.replace("$fields", " ".join(fields))
    query = query.replace("$var_decls", ", ".join(f"${k}: {v[1]}" for k, v in variables.items()))
    query = query.replace("$var_args", ", ".join(f"{k}:${k}" for k in variables))
    values = {k: v[0] for k, v in variables.items()}
    return textwrap.dedent(query).strip(), {**values, "limit": limit, "offset": offset}


async def gql(api: Api, headers: dict[str, str], query: str, variables: dict[str, Any] | None = None) -> Any:
    resp = await api.client.post(
        "/admin/gql", json={"query": query, "variables": variables or {}}, headers=headers
    )
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def data(api: Api, headers: dict[str, str], query: str, variables: dict[str, Any] | None = None) -> Any:
    body = await gql(api, headers, query, variables)
    assert "errors" not in body, body
    return body["data"]


async def listing(api: Api, headers: dict[str, str], fields: list[str], **kw: Any) -> dict[str, Any]:
    query, variables = session_list(fields, **kw)
    result: dict[str, Any] = (await data(api, headers, query, variables))["compute_session_list"]
    for item in result["items"]:
        assert list(item) == fields  # the CLI pairs columns with values by position
    return result


async def created(api: Api, headers: dict[str, str], **body: Any) -> str:
    resp = await api.create(headers, **body)
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["id"])


async def set_status(api: Api, session_id: str, status: str) -> None:
    async with api.engine.begin() as conn:
        await conn.execute(update(Session).where(Session.id == uuid.UUID(session_id)).values(status=status))


async def test_keypair_says_who_is_admin(api: Api) -> None:
    admin = (await data(api, api.admin, KEYPAIR_INFO))["keypair"]
    alice = (await data(api, api.alice, KEYPAIR_INFO))["keypair"]
    assert list(admin) == list(alice) == ["user_id", "access_key", "secret_key", "is_active", "is_admin"]
    assert admin["is_admin"] is True and alice["is_admin"] is False
    assert alice["user_id"] == "alice" and alice["is_active"] is True and alice["secret_key"] is None
    await created(api, api.alice)
    info = (await data(api, api.alice, KEYPAIR_ADMIN_INFO))["keypair"]
    assert info["user_info"] == {"full_name": None}
    assert info["access_key"] == alice["access_key"] and info["concurrency_used"] == 1
    assert info["created_at"].endswith("Z")
    # a user naming another keypair reads nothing; an admin reads it
    other = f'query {{ keypair(access_key: "{admin["access_key"]}") {{ access_key is_admin }} }}'
    assert (await data(api, api.alice, other))["keypair"] is None
    theirs = f'query {{ keypair(access_key: "{alice["access_key"]}") {{ access_key is_admin }} }}'
    assert (await data(api, api.admin, theirs))["keypair"] == {
        "access_key": alice["access_key"],
        "is_admin": False,
    }


async def test_ps_lists_a_users_own_sessions_and_an_admin_all(api: Api) -> None:
    a1 = await created(api, api.alice, name="a-one")
    a2 = await created(api, api.alice, name="a-two")
    b1 = await created(api, api.bob, name="b-one")
    mine = await listing(api, api.alice, PS_USER)
    assert mine["total_count"] == 2
    assert [i["id"] for i in mine["items"]] == [a2, a1]  # newest first
    first = mine["items"][0]
    assert (first["name"], first["type"], first["image"], first["group_name"]) == (
        "a-two",
        "BATCH",
        "python:3",
        "default",
    )
    assert (first["status"], first["result"], first["status_info"], first["tag"]) == (
        "PENDING",
        "UNDEFINED",
        None,
        None,
    )
    assert json.loads(first["occupying_slots"]) == {}  # nothing placed yet
    everyone = await listing(api, api.admin, PS_ADMIN, status=ALL)
    assert everyone["total_count"] == 3 and {i["id"] for i in everyone["items"]} == {a1, a2, b1}
    bob_key = next(i["access_key"] for i in everyone["items"] if i["id"] == b1)
    bobs = await listing(api, api.admin, PS_ADMIN, access_key=bob_key)
    assert bobs["total_count"] == 1 and [i["id"] for i in bobs["items"]] == [b1]
    # a page: one item, the total still counts every match
    page = await listing(api, api.alice, PS_USER, limit=1, offset=1)
    assert page["total_count"] == 2 and [i["id"] for i in page["items"]] == [a1]
    ordered = await listing(api, api.alice, ["name"], order="+name")
    assert [i["name"] for i in ordered["items"]] == ["a-one", "a-two"]


async def test_status_filter(api: Api) -> None:
    a1 = await created(api, api.alice)
    a2 = await created(api, api.alice)
    await set_status(api, a1, "RUNNING")
    await set_status(api, a2, "TERMINATED")
    assert [i["id"] for i in (await listing(api, api.alice, PS_USER, status=RUNNING))["items"]] == [a1]
    assert [i["id"] for i in (await listing(api, api.alice, PS_USER, status=DEAD))["items"]] == [a2]
    active = await listing(api, api.alice, PS_USER)
    assert active["total_count"] == 1 and active["items"][0]["status"] == "RUNNING"
    assert (await listing(api, api.alice, PS_USER, status=ALL))["total_count"] == 2
    assert (await listing(api, api.alice, PS_USER, status="RUNNING_DEGRADED"))["total_count"] == 0


async def test_session_info_for_own_and_null_for_anothers(api: Api) -> None:
    parent = await created(api, api.alice, name="parent")
    sid = await created(api, api.alice, name="child", depends_on=[parent], resources={"cpu": 1, "mem": "1g"})
    await place_kernels(api.engine, sid, "agent-1")
    await set_status(api, sid, "RUNNING")
    item = (await data(api, api.alice, INFO, {"id": sid}))["compute_session"]
    assert list(item) == INFO_KEYS
    assert (item["id"], item["name"], item["status"]) == (sid, "child", "RUNNING")
    assert json.loads(item["status_data"]) == {}
    assert json.loads(item["occupying_slots"]) == {"cpu": "1", "mem": str(2**30)}
    assert item["idle_checks"] is None
    assert item["dependencies"] == [{"name": "parent", "id": parent}]
    [kernel] = item["containers"]
    assert kernel["id"] == item["main_kernel_id"] and kernel["session_id"] == sid
    assert (kernel["cluster_role"], kernel["cluster_idx"], kernel["agent"], kernel["status"]) == (
        "main",
        0,
        "agent-1",
        "RUNNING",
    )
    assert json.loads(kernel["occupied_slots"]) == {"cpu": "1", "mem": str(2**30)}
    assert json.loads(kernel["status_data"]) == {} and kernel["live_stat"] is None
    assert (await data(api, api.bob, INFO, {"id": sid}))["compute_session"] is None
    assert (await data(api, api.admin, INFO, {"id": sid}))["compute_session"]["id"] == sid
    assert (await data(api, api.alice, INFO, {"id": str(uuid.uuid4())}))["compute_session"] is None


async def test_errors_are_graphql_errors_or_problems(api: Api) -> None:
    alice_key = (await data(api, api.alice, KEYPAIR_INFO))["keypair"]["access_key"]
    admin_key = (await data(api, api.admin, KEYPAIR_INFO))["keypair"]["access_key"]
    assert (await listing(api, api.alice, PS_USER, access_key=alice_key))["total_count"] == 0
    for query, variables in [
        ("query { keypair { nope } }", None),
        ("query {", None),
        ("subscription { compute_session_list }", None),
        ('mutation { modify_compute_session(input: {id: "x"}) { clientMutationId } }', None),
        (INFO, {"id": "not-a-uuid"}),
        session_list(PS_USER, access_key=admin_key),
        session_list(PS_USER, status="SLEEPING"),
        session_list(PS_USER, limit=0),
        session_list(PS_USER, order="-secret"),
        ("{ compute_session_list(limit: 1, offset: 0, filter: \"name == 'x'\") { total_count } }", None),
        (
            "{ compute_session_list(limit: 1, offset: 0) { items { dependencies { dependencies {"
            " dependencies { dependencies { dependencies { id } } } } } } } }",
            None,
        ),
    ]:
        body = await gql(api, api.alice, query, variables)
        assert body.get("errors") and body.get("data") in (None, {"compute_session_list": None}), body
    assert (await data(api, api.alice, "{ __typename __schema { queryType { name } } }")) == {
        "__typename": "Query",
        "__schema": {"queryType": {"name": "Query"}},
    }
    resp = await api.client.post("/admin/gql", data=b"{not json", headers=api.alice)
    assert resp.status == 400 and resp.content_type == "application/problem+json"
    resp = await api.client.post("/admin/gql", json={"variables": {}}, headers=api.alice)
    assert resp.status == 422 and resp.content_type == "application/problem+json"
    resp = await api.client.post("/admin/gql", json={"query": KEYPAIR_INFO})
    assert resp.status == 401
