"""`priority` (0-100, default 10): above the default for admins only; a user gets 403 naming the rule."""

from __future__ import annotations

import pytest

from tests.api.conftest import Api
from tests.api.test_auth_and_errors import assert_problem


@pytest.mark.parametrize("dry_run", ["false", "true"])
async def test_a_user_may_not_raise_priority(api: Api, dry_run: str) -> None:
    before = await api.counts()
    resp = await api.client.post(
        "/v2/sessions",
        json={"image": "python:3", "command": "true", "priority": 11},
        params={"dry_run": dry_run},
        headers=api.alice,
    )
    body = await assert_problem(resp, 403)
    assert body["type"] == "https://sokovan.dev/problems/forbidden"
    assert "priority 11" in str(body["detail"]) and "only admins" in str(body["detail"])
    assert body["errors"] == [{"field": "priority", "message": body["detail"], "type": "admin_only"}]
    assert await api.counts() == before


async def test_a_user_may_lower_priority_and_gets_the_default(api: Api) -> None:
    low = await api.create(api.alice, priority=0)
    assert low.status == 201 and (await low.json())["priority"] == 0
    default = await api.create(api.alice)
    assert default.status == 201 and (await default.json())["priority"] == 10


@pytest.mark.parametrize("priority", [11, 50, 100])
async def test_an_admin_may_raise_priority(api: Api, priority: int) -> None:
    resp = await api.create(api.admin, priority=priority)
    assert resp.status == 201, await resp.text()
    session = await resp.json()
    assert session["priority"] == priority
    read = await api.client.get(f"/v2/sessions/{session['id']}", headers=api.admin)
    assert (await read.json())["priority"] == priority


async def test_an_admin_dry_run_above_the_default(api: Api) -> None:
    resp = await api.client.post(
        "/v2/sessions",
        json={"image": "python:3", "command": "true", "priority": 100},
        params={"dry_run": "true"},
        headers=api.admin,
    )
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["placeable"] is True


async def test_priority_outside_0_to_100_is_422_for_anyone(api: Api) -> None:
    for priority in (-1, 101):
        await assert_problem(await api.create(api.admin, priority=priority), 422)
