"""Conditional GETs: an unchanged page is a 304 with no body; a change gives a new ETag."""

from __future__ import annotations

import asyncio

from sqlalchemy import update

from sokovan.db.models import Agent
from tests.api.conftest import Api


async def test_an_unchanged_agent_list_is_304_and_a_change_is_a_new_page(api: Api) -> None:
    first = await api.client.get("/v2/agents", headers=api.admin)
    assert first.status == 200
    tag = first.headers["ETag"]
    assert tag.startswith('W/"')
    again = await api.client.get("/v2/agents", headers={**api.admin, "If-None-Match": tag})
    assert again.status == 304 and again.headers["ETag"] == tag
    assert await again.read() == b""
    listed = await api.client.get("/v2/agents", headers={**api.admin, "If-None-Match": f'"other", {tag}'})
    assert listed.status == 304
    async with api.engine.begin() as conn:  # a change with no event: on the page within a sweep
        await conn.execute(update(Agent).where(Agent.id == "agent-2").values(status="DEGRADED"))
    for _ in range(200):
        changed = await api.client.get("/v2/agents", headers={**api.admin, "If-None-Match": tag})
        if changed.status != 304:
            break
        await asyncio.sleep(0.05)
    assert changed.status == 200 and changed.headers["ETag"] != tag
    assert "DEGRADED" in await changed.text()


async def test_the_tag_is_per_caller_and_never_skips_authentication(api: Api) -> None:
    admin = (await api.client.get("/v2/agents", headers=api.admin)).headers["ETag"]
    alice = await api.client.get("/v2/agents", headers={**api.alice, "If-None-Match": admin})
    assert alice.status == 200  # a user's page hides what an admin's shows: another body, another tag
    nobody = await api.client.get("/v2/agents", headers={"If-None-Match": admin})
    assert nobody.status == 401


async def test_sessions_pages_are_conditional_too(api: Api) -> None:
    resp = await api.create(api.alice)
    assert resp.status == 201
    page = await api.client.get("/v2/sessions", headers=api.alice)
    tag = page.headers["ETag"]
    same = await api.client.get("/v2/sessions", headers={**api.alice, "If-None-Match": tag})
    assert same.status == 304
