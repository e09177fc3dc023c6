"""POST /v2/keypairs and bootstrap."""

from __future__ import annotations

import re

from sqlalchemy import func, select

from sokovan.db.models import Domain, Keypair, Project, ScalingGroup, User
from sokovan.manager.repositories.tenancy import bootstrap, hash_token
from tests.api.conftest import Api, bearer
from tests.api.test_auth_and_errors import assert_problem


async def test_admin_creates_keypair_and_it_works(api: Api) -> None:
    resp = await api.client.post(
        "/v2/keypairs", json={"user": "carol", "project": "research"}, headers=api.admin
    )
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    assert re.fullmatch(r"AK[A-Z0-9]{18}", body["access_key"])
    async with api.engine.connect() as conn:
        stored = (
            await conn.execute(select(Keypair.token_hash).where(Keypair.access_key == body["access_key"]))
        ).scalar_one()
        assert stored == hash_token(body["token"]) != body["token"]
        assert (await conn.execute(select(Project.id).where(Project.name == "research"))).first()
    created = await api.create(bearer(body["token"]))
    assert created.status == 201
    assert (await created.json())["owner"] == "carol"


async def test_unknown_domain_or_policy_is_refused(api: Api) -> None:
    for patch in ({"domain": "nowhere"}, {"resource_policy": "gold"}):
        resp = await api.client.post(
            "/v2/keypairs", json={"user": "dave", "project": "p", **patch}, headers=api.admin
        )
        await assert_problem(resp, 422)
    async with api.engine.connect() as conn:
        assert (await conn.execute(select(User.id).where(User.name == "dave"))).first() is None
    resp = await api.client.post(
        "/v2/keypairs", json={"user": "x", "project": "p", "role": "god"}, headers=api.admin
    )
    await assert_problem(resp, 422)


async def test_admin_keypair_can_list_everything(api: Api) -> None:
    resp = await api.client.post(
        "/v2/keypairs", json={"user": "root2", "project": "default", "role": "admin"}, headers=api.admin
    )
    token = (await resp.json())["token"]
    await api.create(api.alice)
    body = await (await api.client.get("/v2/sessions", headers=bearer(token))).json()
    assert len(body["items"]) == 1


async def test_bootstrap_is_repeatable_with_a_new_keypair_each_time(api: Api) -> None:
    key1, token1 = await bootstrap(api.engine)
    key2, token2 = await bootstrap(api.engine)
    assert key1 != key2 and token1 != token2
    async with api.engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(Domain))).scalar_one() == 1
        assert (await conn.execute(select(func.count()).select_from(ScalingGroup))).scalar_one() == 1
        sg = (await conn.execute(select(ScalingGroup.scheduler, ScalingGroup.agent_selection))).one()
        assert tuple(sg) == ("fifo", "concentrated")
        admins = (
            await conn.execute(select(func.count()).select_from(User).where(User.name == "admin"))
        ).scalar_one()
        assert admins == 1
    assert (await api.client.get("/v2/sessions", headers=bearer(token1))).status == 200
