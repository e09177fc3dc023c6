"""The retry surface of REST v2: the cluster default in real etcd, attempts, retry_state."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aetcd
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import update

from sokovan.common.retry_policy import RetryPolicy
from sokovan.common.settings import Settings
from sokovan.config.cluster import ClusterConfig, EtcdConfigWatcher
from sokovan.db.models import Session
from sokovan.manager.api import create_app
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api
from tests.api.tenancy_helpers import audit_actions
from tests.api.test_auth_and_errors import assert_problem

PATH = "/v2/config/retry-policy-default"
SEED_DEFAULT = RetryPolicy().model_dump(mode="json")


def key(settings: Settings) -> bytes:
    return f"{settings.etcd_prefix}/config/manager/retry_policy_default".encode()


async def wait_for(predicate: Callable[[], Any], seconds: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


@asynccontextmanager
async def app_with_default(
    ctx: ManagerContext, retry_policy_default: bytes
) -> AsyncIterator[tuple[TestClient, ClusterConfig]]:  # type: ignore[type-arg]
    """An app of its own, served, with a live cluster config whose `manager/retry_policy_default`
    is this; the client and that config."""
    live = ClusterConfig()
    live.apply("manager/retry_policy_default", retry_policy_default)
    client = TestClient(TestServer(create_app(ctx, live)))
    await client.start_server()
    try:
        yield client, live
    finally:
        await client.close()


async def get_default(api: Api, headers: dict[str, str]) -> dict[str, Any]:
    resp = await api.client.get(PATH, headers=headers)
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def test_read_needs_a_token_and_answers_the_seed_default(api: Api) -> None:
    await assert_problem(await api.client.get(PATH), 401)
    assert await get_default(api, api.alice) == SEED_DEFAULT
    assert SEED_DEFAULT["max_retries"] == 0 and SEED_DEFAULT["jitter"] == "deterministic"


async def test_write_is_for_admins_and_validated(api: Api, etcd: aetcd.Client, settings: Settings) -> None:
    await assert_problem(await api.client.put(PATH, json={"max_retries": 2}), 401)
    await assert_problem(await api.client.put(PATH, json={"max_retries": 2}, headers=api.alice), 403)
    for bad in (
        {"max_retries": -1},
        {"jitter_ratio": 1.5},
        {"jitter_ratio": -0.1},
        {"retry_delay": 86401},
        {"max_retry_delay": 10**6},
        {"backoff": "linear"},
        {"eligible_causes": ["USER_CANCELLED"]},
        {"eligible_causes": ["DEPENDENCY_FAILED"]},
        {"surprise": True},
    ):
        await assert_problem(await api.client.put(PATH, json=bad, headers=api.admin), 422)
    await assert_problem(await api.client.put(PATH, data=b"[1]", headers=api.admin), 422)
    await assert_problem(await api.client.put(PATH, data=b"{nope", headers=api.admin), 400)
    assert await etcd.get(key(settings)) is None  # nothing was written
    assert await get_default(api, api.admin) == SEED_DEFAULT


async def test_round_trip_through_etcd_replaces_whole(
    api: Api, etcd: aetcd.Client, settings: Settings
) -> None:
    resp = await api.client.put(
        PATH, json={"max_retries": 3, "retry_delay": 5, "backoff": "exponential"}, headers=api.admin
    )
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert (body["max_retries"], body["retry_delay"], body["backoff"]) == (3, 5.0, "exponential")
    stored = json.loads((await etcd.get(key(settings))).value)
    assert stored == body  # the bare RetryPolicy object, every field
    assert stored["jitter_ratio"] == 0.25 and len(stored["eligible_causes"]) == 8
    assert await get_default(api, api.alice) == body

    # PUT replaces it whole: what is left out goes back to the built-in defaults.
    body = await (await api.client.put(PATH, json={"max_retries": 1}, headers=api.admin)).json()
    assert body == {**SEED_DEFAULT, "max_retries": 1}
    assert json.loads((await etcd.get(key(settings))).value) == body
    assert ("retry_policy_default.put", key(settings).decode()) in await audit_actions(api.engine)


async def test_etcd_changes_apply_without_restart_and_invalid_ones_are_ignored(
    api: Api, etcd: aetcd.Client, settings: Settings
) -> None:
    async def reads(max_retries: int) -> bool:
        return (await get_default(api, api.alice))["max_retries"] == max_retries

    await etcd.put(key(settings), json.dumps({"max_retries": 4, "jitter": "random"}).encode())  # like etcdctl
    await wait_for(lambda: reads(4))
    assert (await get_default(api, api.alice))["jitter"] == "random"
    await etcd.put(key(settings), json.dumps({"max_retries": -3}).encode())
    await etcd.put(key(settings), b"not json")
    # A valid write to another section after the invalid ones shows they were all seen.
    await etcd.put(f"{settings.etcd_prefix}/config/manager/loops".encode(), b'{"long_cycle_interval": 1}')
    await asyncio.sleep(0.5)
    assert (await get_default(api, api.alice))["max_retries"] == 4  # the last valid one stays
    await etcd.delete(key(settings))
    await wait_for(lambda: reads(0))


async def test_every_managers_watcher_picks_up_a_write(
    api: Api, etcd: aetcd.Client, settings: Settings
) -> None:
    other = ClusterConfig()  # another manager's live settings
    watcher = EtcdConfigWatcher(etcd, settings.etcd_prefix, other)
    await watcher.load()
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        await asyncio.sleep(0.3)
        resp = await api.client.put(PATH, json={"max_retries": 6, "retry_delay": 2}, headers=api.admin)
        assert resp.status == 200

        async def applied() -> bool:
            return other.retry_policy_default.max_retries == 6

        await wait_for(applied)
        assert other.retry_policy_default == RetryPolicy(max_retries=6, retry_delay=2)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_app_reads_the_managers_own_config(ctx: ManagerContext, api: Api) -> None:
    async with app_with_default(ctx, b'{"max_retries": 7}') as (client, live):
        resp = await client.get(PATH, headers=api.alice)
        assert (await resp.json())["max_retries"] == 7
        resp = await client.put(PATH, json={"max_retries": 2}, headers=api.admin)
        assert resp.status == 200
        assert live.retry_policy_default.max_retries == 2  # applied at once, the watcher confirms it


async def test_openapi_lists_the_retry_routes(api: Api) -> None:
    doc = await (await api.client.get("/v2/openapi.json")).json()
    assert {"get", "put"} <= doc["paths"][PATH].keys()
    assert "403" in doc["paths"][PATH]["put"]["responses"]
    attempts = doc["paths"]["/v2/sessions/{id}/attempts"]["get"]
    assert attempts["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "AttemptList"
    )


# -- attempts and retry_state --------------------------------------------------------------------


async def _create(api: Api, headers: dict[str, str], **body: Any) -> str:
    resp = await api.create(headers, **body)
    assert resp.status == 201, await resp.text()
    sid: str = (await resp.json())["id"]
    return sid


async def _chain(api: Api) -> list[str]:
    """Three attempts of alice's: two that failed and the retry now pending."""
    first = await _create(api, api.alice, retry_policy={"max_retries": 2})
    second = await _create(api, api.alice, retry_policy={"max_retries": 2})
    third = await _create(api, api.alice, retry_policy={"max_retries": 2})
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Session)
            .where(Session.id == first)
            .values(status="ERROR", result="FAILURE", status_info={"cause": "OOM_KILLED", "message": "oom"})
        )
        await conn.execute(
            update(Session)
            .where(Session.id == second)
            .values(
                parent_session_id=first,
                retry_count=1,
                retry_cause="OOM_KILLED",
                status="ERROR",
                result="FAILURE",
                status_info={"cause": "KERNEL_NONZERO_EXIT", "message": "exit 3"},
            )
        )
        await conn.execute(
            update(Session)
            .where(Session.id == third)
            .values(parent_session_id=second, retry_count=2, retry_cause="KERNEL_NONZERO_EXIT")
        )
    return [first, second, third]


async def test_attempts_list_the_whole_chain_oldest_first(api: Api) -> None:
    chain = await _chain(api)
    for sid in chain:
        resp = await api.client.get(f"/v2/sessions/{sid}/attempts", headers=api.alice)
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        assert body["next_cursor"] is None
        assert [a["id"] for a in body["items"]] == chain
    items = body["items"]
    assert [(a["status"], a["result"], a["cause"], a["retry_count"]) for a in items] == [
        ("ERROR", "FAILURE", "OOM_KILLED", 0),
        ("ERROR", "FAILURE", "KERNEL_NONZERO_EXIT", 1),
        ("PENDING", None, None, 2),
    ]
    assert [a["retry_cause"] for a in items] == [None, "OOM_KILLED", "KERNEL_NONZERO_EXIT"]
    assert all(a["created_at"] for a in items) and items[2]["terminated_at"] is None
    admin = await (await api.client.get(f"/v2/sessions/{chain[1]}/attempts", headers=api.admin)).json()
    assert [a["id"] for a in admin["items"]] == chain


async def test_attempts_are_404_for_others_and_unknown_ids(api: Api) -> None:
    chain = await _chain(api)
    await assert_problem(await api.client.get(f"/v2/sessions/{chain[0]}/attempts", headers=api.bob), 404)
    await assert_problem(
        await api.client.get(f"/v2/sessions/{uuid.uuid4()}/attempts", headers=api.alice), 404
    )
    await assert_problem(await api.client.get("/v2/sessions/nope/attempts", headers=api.alice), 404)
    await assert_problem(await api.client.get(f"/v2/sessions/{chain[0]}/attempts"), 401)


async def test_a_session_without_retries_is_its_own_single_attempt(api: Api) -> None:
    sid = await _create(api, api.bob)
    body = await (await api.client.get(f"/v2/sessions/{sid}/attempts", headers=api.bob)).json()
    assert [(a["id"], a["status"], a["retry_count"]) for a in body["items"]] == [(sid, "PENDING", 0)]


async def test_retry_state_shows_the_scheduled_retry_until_the_child_exists(api: Api) -> None:
    sid = await _create(api, api.alice, retry_policy={"max_retries": 2})
    due = "2030-01-01T00:01:00Z"
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Session)
            .where(Session.id == sid)
            .values(
                max_retries=2,
                status="ERROR",
                result="FAILURE",
                status_info={
                    "cause": "KERNEL_NONZERO_EXIT",
                    "retry": {"decision": "scheduled", "due_at": due, "attempt": 2},
                },
            )
        )
    body = await (await api.client.get(f"/v2/sessions/{sid}", headers=api.alice)).json()
    assert body["retry_state"] == f"attempt 1 of 3; retry 2 due at {due}"
    assert body["retry_child_id"] is None and body["retry_chain"] == [sid]

    child = await _create(api, api.alice)
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Session)
            .where(Session.id == child)
            .values(parent_session_id=sid, retry_count=1, max_retries=2)
        )
    body = await (await api.client.get(f"/v2/sessions/{sid}", headers=api.alice)).json()
    assert body["retry_state"] == "attempt 1 of 3"
    assert body["retry_child_id"] == child
    assert (await (await api.client.get(f"/v2/sessions/{child}", headers=api.alice)).json())[
        "retry_state"
    ] == "attempt 2 of 3"


async def test_retry_state_for_exhausted_and_ineligible_reads_plainly(api: Api) -> None:
    sid = await _create(api, api.alice)
    for decision in ({"decision": "exhausted"}, {"decision": "ineligible", "reason": "interactive"}):
        async with api.engine.begin() as conn:
            await conn.execute(
                update(Session).where(Session.id == sid).values(status_info={"retry": decision})
            )
        body = await (await api.client.get(f"/v2/sessions/{sid}", headers=api.alice)).json()
        assert body["retry_state"] == "attempt 1 of 1"


async def test_retry_policy_is_accepted_and_refused_on_create(api: Api) -> None:
    resp = await api.create(
        api.alice, retry_policy={"max_retries": 2, "backoff": "exponential", "jitter": "none"}
    )
    assert resp.status == 201
    body = await resp.json()
    assert (body["max_retries"], body["retry_count"], body["retry_state"]) == (2, 0, "attempt 1 of 3")
    assert body["parent_session_id"] is None and body["retry_cause"] is None
    for bad in (
        {"max_retries": -1},
        {"jitter_ratio": 2},
        {"retry_delay": 90000},
        {"eligible_causes": ["QUOTA_EXCEEDED"]},
    ):
        await assert_problem(await api.create(api.alice, retry_policy=bad), 422)


async def test_a_new_session_counts_its_attempts_from_the_defaults(ctx: ManagerContext, api: Api) -> None:
    """Session > project > domain > cluster, field by field: known from creation on."""
    async with app_with_default(ctx, b'{"max_retries": 2}') as (client, _):
        body = {"image": "python:3", "type": "batch", "command": "true"}
        resp = await client.post("/v2/sessions", json=body, headers=api.alice)
        assert (await resp.json())["retry_state"] == "attempt 1 of 3"  # the cluster default
        resp = await client.put(
            "/v2/projects/default", json={"retry_policy_default": {"retry_delay": 5}}, headers=api.admin
        )
        assert resp.status == 200  # sets a field the cluster default does not: both apply
        resp = await client.post("/v2/sessions", json=body, headers=api.alice)
        assert (await resp.json())["retry_state"] == "attempt 1 of 3"
        own = {**body, "retry_policy": {"max_retries": 0}}
        resp = await client.post("/v2/sessions", json=own, headers=api.alice)
        assert (await resp.json())["retry_state"] == "attempt 1 of 1"  # the session's own wins
