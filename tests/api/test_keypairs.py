"""POST /v2/keypairs, POST /v2/keypairs/{access_key}/secret and bootstrap."""

from __future__ import annotations

import re

from sqlalchemy import func, select

from sokovan.db.models import AuditLog, Domain, Keypair, Project, ScalingGroup, User
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
    assert re.fullmatch(r"[A-Za-z0-9]{40}", body["secret_key"])
    async with api.engine.connect() as conn:
        stored, sealed = (
            await conn.execute(
                select(Keypair.token_hash, Keypair.secret_key_enc).where(
                    Keypair.access_key == body["access_key"]
                )
            )
        ).one()
        assert stored == hash_token(body["token"]) != body["token"]
        assert sealed is not None and body["secret_key"] not in sealed
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


async def _access_key(api: Api, headers: dict[str, str]) -> str:
    key: str = (await (await api.client.get("/v2/whoami", headers=headers)).json())["access_key"]
    return key


async def test_rotating_a_secret_key_is_for_its_owner_or_an_admin(api: Api) -> None:
    alice_key, bob_key = await _access_key(api, api.alice), await _access_key(api, api.bob)
    before = await api.counts()
    # Bob's keypair is not found by Alice, as an unknown one is not: nothing tells her it exists
    await assert_problem(await api.client.post(f"/v2/keypairs/{bob_key}/secret", headers=api.alice), 404)
    await assert_problem(
        await api.client.post("/v2/keypairs/AKNOBODY000000000000/secret", headers=api.alice), 404
    )
    await assert_problem(await api.client.post(f"/v2/keypairs/{bob_key}/secret"), 401)
    assert await api.counts() == before  # refusals write nothing
    secrets = []
    for headers in (api.alice, api.admin):
        resp = await api.client.post(f"/v2/keypairs/{alice_key}/secret", headers=headers)
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        assert set(body) == {"access_key", "secret_key"} and body["access_key"] == alice_key
        secrets.append(body["secret_key"])
    assert secrets[0] != secrets[1]
    async with api.engine.connect() as conn:
        audited = (
            await conn.execute(
                select(func.count()).select_from(AuditLog).where(AuditLog.action == "keypair.rotate_secret")
            )
        ).scalar_one()
    assert audited == 2
    # The token is untouched by a rotation.
    assert (await api.client.get("/v2/whoami", headers=api.alice)).status == 200
