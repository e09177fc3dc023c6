"""Backend.AI's request signatures (`Authorization: BackendAI ...`): the server computes what the
client's own `generate_signature` does, and over the real API a signed request acts as its keypair,
once, within the date window, with the keypair's current secret only."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import hmac
from typing import Any

import pytest
from sqlalchemy import select, update

from sokovan.common.secret_box import SecretBoxError, new_secret_key, open_sealed, seal
from sokovan.db.models import Keypair
from sokovan.manager.api.auth import CTX_KEY
from sokovan.manager.api.compat.signature import SignerCache, signature_of
from tests.api.conftest import Api, bearer
from tests.api.test_auth_and_errors import assert_problem

VERSION = "v9.20250722"

# Inputs and outputs of `ai.backend.common.auth.utils.generate_signature` (backend.ai-client
# 26.9.6), run under its own Python: (method, endpoint's raw authority, date, rel_url, content
# type, secret key) -> hex signature. The third is the event stream's, dated in another zone (the
# signing key takes the date's own day, not UTC's).
GOLDEN = [
    (
        "GET",
        "127.0.0.1:8081",
        dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC),
        "/session?name=my+session&limit=10",
        "text/plain",
        "s3cr3tS3cr3tS3cr3tS3cr3tS3cr3tS3cr3tABCD",
        "b1ef430b388703f5c7976ed974b59d1496b8abb65ac758cac795e4bd96daa42c",
    ),
    (
        "POST",
        "api.example.com:8443",
        dt.datetime(2026, 12, 31, 23, 59, 59, 1, tzinfo=dt.UTC),
        "/base/session",
        "application/json",
        "0123456789abcdefghijABCDEFGHIJ0123456789",
        "0a4be43637f26fdea347e74bb212d040c148717c2b073846fa732894eb75aa9c",
    ),
    (
        "GET",
        "localhost:8090",
        dt.datetime(2026, 6, 15, 12, 0, 0, 500000, tzinfo=dt.timezone(dt.timedelta(hours=9))),
        "/events/session?sessionName=%2A",
        "application/octet-stream",
        "ZZZZZZZZZZYYYYYYYYYYXXXXXXXXXXWWWWWWWWWW",
        "95969e28f8328e1ce8c2b8346d99c265b2e93adbda2599997492f32db78d628e",
    ),
]


@pytest.mark.parametrize(("method", "host", "date", "rel_url", "content_type", "secret", "expected"), GOLDEN)
def test_the_server_signs_as_the_client_does(
    method: str, host: str, date: dt.datetime, rel_url: str, content_type: str, secret: str, expected: str
) -> None:
    got = signature_of(
        secret_key=secret,
        method=method,
        rel_url=rel_url,
        date=date.isoformat(),
        host=host,
        content_type=content_type,
        version=VERSION,
    )
    assert got == expected


def test_a_sealed_secret_opens_only_with_its_cluster_secret_and_untouched() -> None:
    secret = new_secret_key()
    assert len(secret) == 40 and secret.isalnum()
    sealed = seal(secret, "cluster-1")
    assert sealed.startswith("v1:") and secret not in sealed and sealed != seal(secret, "cluster-1")
    assert open_sealed(sealed, "cluster-1") == secret
    with pytest.raises(SecretBoxError, match="another cluster secret"):
        open_sealed(sealed, "cluster-2")
    version, nonce, data = sealed.split(":")
    flipped = data[:5] + ("A" if data[5] != "A" else "B") + data[6:]
    for bad in (f"{version}:{nonce}:{flipped}", "v2:" + sealed[3:], "v1:??:??", "plain"):
        with pytest.raises(SecretBoxError):
            open_sealed(bad, "cluster-1")


# -- over the API ---------------------------------------------------------------------------


def sign(
    api: Api,
    method: str,
    rel_url: str,
    access_key: str,
    secret_key: str,
    *,
    content_type: str | None = "text/plain",
    date: dt.datetime | None = None,
) -> dict[str, str]:
    """The headers Backend.AI's client sends, computed here as it computes them (not with the
    server's code): None for `content_type` is the event stream (no header, signed as
    application/octet-stream)."""
    date = date or dt.datetime.now(dt.UTC)
    host = f"{api.client.host}:{api.client.port}"
    signed = "\n".join(
        [
            method,
            rel_url,
            date.isoformat(),
            f"host:{host}",
            f"content-type:{content_type or 'application/octet-stream'}",
            f"x-backendai-version:{VERSION}",
            hashlib.sha256(b"").hexdigest(),
        ]
    )
    key = hmac.new(secret_key.encode(), date.strftime("%Y%m%d").encode(), hashlib.sha256).digest()
    key = hmac.new(key, host.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, signed.encode(), hashlib.sha256).hexdigest()
    headers = {
        "Authorization": f"BackendAI signMethod=HMAC-SHA256, credential={access_key}:{signature}",
        "Date": date.isoformat(),
        "X-BackendAI-Version": VERSION,
    }
    if content_type is not None:
        headers["Content-Type"] = content_type
    return headers


def app_ctx(api: Api) -> Any:
    app = api.client.app
    assert app is not None
    return app[CTX_KEY]


def cluster_secret(api: Api) -> str:
    secret: str = app_ctx(api).settings.cluster_secret
    assert secret
    return secret


async def new_keypair(api: Api, user: str) -> dict[str, Any]:
    resp = await api.client.post("/v2/keypairs", json={"user": user, "project": "default"}, headers=api.admin)
    assert resp.status == 201, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def whoami(api: Api, headers: dict[str, str]) -> Any:
    return await api.client.get("/v2/whoami", headers=headers)


async def test_a_signed_request_acts_as_its_keypair(api: Api) -> None:
    carol = await new_keypair(api, "carol")
    ak, sk = carol["access_key"], carol["secret_key"]
    resp = await whoami(api, sign(api, "GET", "/v2/whoami", ak, sk))
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["user"] == "carol" and (await resp.json())["access_key"] == ak
    # The event stream's way: no Content-Type, signed as application/octet-stream.
    assert (await whoami(api, sign(api, "GET", "/v2/whoami", ak, sk, content_type=None))).status == 200
    listed = await api.client.get(
        "/v2/sessions?limit=5", headers=sign(api, "GET", "/v2/sessions?limit=5", ak, sk)
    )
    assert listed.status == 200, await listed.text()
    headers = sign(api, "POST", "/v2/sessions", ak, sk, content_type="application/json")
    created = await api.create(headers)
    assert created.status == 201, await created.text()
    assert (await created.json())["owner"] == "carol"


async def test_the_database_holds_the_secret_only_sealed(api: Api) -> None:
    carol = await new_keypair(api, "carol")
    async with api.engine.connect() as conn:
        stored = (
            await conn.execute(
                select(Keypair.secret_key_enc).where(Keypair.access_key == carol["access_key"])
            )
        ).scalar_one()
    assert stored is not None and carol["secret_key"] not in stored and stored.startswith("v1:")
    assert open_sealed(stored, cluster_secret(api)) == carol["secret_key"]


async def test_refused_signatures_are_401_problems_that_write_nothing(api: Api) -> None:
    carol = await new_keypair(api, "carol")
    ak, sk = carol["access_key"], carol["secret_key"]
    before = await api.counts()
    now = dt.datetime.now(dt.UTC)
    stale, early = now - dt.timedelta(minutes=20), now + dt.timedelta(minutes=20)
    cases: dict[str, tuple[dict[str, str], str]] = {
        "wrong secret": (sign(api, "GET", "/v2/whoami", ak, new_secret_key()), "signature mismatch"),
        "20 minutes old": (
            sign(api, "GET", "/v2/whoami", ak, sk, date=stale),
            "away from the server's clock",
        ),
        "20 minutes ahead": (
            sign(api, "GET", "/v2/whoami", ak, sk, date=early),
            "away from the server's clock",
        ),
        "unknown key": (sign(api, "GET", "/v2/whoami", "AKNOBODY000000000000", sk), "unknown or inactive"),
        "another path": (sign(api, "GET", "/v2/sessions", ak, sk), "signature mismatch"),
        "another type": (
            {**sign(api, "GET", "/v2/whoami", ak, sk), "Content-Type": "application/json"},
            "signature mismatch",
        ),
        "no Date": (
            {k: v for k, v in sign(api, "GET", "/v2/whoami", ak, sk).items() if k != "Date"},
            "needs a Date header",
        ),
        "bad Date": ({**sign(api, "GET", "/v2/whoami", ak, sk), "Date": "yesterday"}, "not an ISO 8601"),
        "malformed": ({"Authorization": "BackendAI credential=nothing"}, "malformed BackendAI"),
        "other hash": (
            {
                **sign(api, "GET", "/v2/whoami", ak, sk),
                "Authorization": f"BackendAI signMethod=HMAC-MD5, credential={ak}:{'0' * 64}",
            },
            "only HMAC-SHA256",
        ),
    }
    redis = app_ctx(api).redis
    for name, (headers, why) in cases.items():
        body = await assert_problem(await whoami(api, headers), 401)
        assert why in str(body["detail"]), (name, body)
    # Nothing remembered for a refused signature: its real twin still goes through.
    assert not await redis.keys(f"{app_ctx(api).settings.etcd_prefix}:compat:sig:*")
    assert await api.counts() == before
    assert (await whoami(api, sign(api, "GET", "/v2/whoami", ak, sk))).status == 200


async def test_a_replayed_request_is_refused(api: Api) -> None:
    carol = await new_keypair(api, "carol")
    headers = sign(api, "GET", "/v2/whoami", carol["access_key"], carol["secret_key"])
    assert (await whoami(api, headers)).status == 200
    body = await assert_problem(await whoami(api, headers), 401)
    assert "replayed request" in str(body["detail"])


async def test_a_keypair_without_a_secret_signs_nothing_until_rotated(api: Api) -> None:
    # alice's keypair was made as before secret keys (tests/api/conftest.py): it has none.
    whoami_alice = await (await whoami(api, api.alice)).json()
    ak = whoami_alice["access_key"]
    body = await assert_problem(await whoami(api, sign(api, "GET", "/v2/whoami", ak, new_secret_key())), 401)
    assert "has no secret key yet" in str(body["detail"])
    rotated = await api.client.post(f"/v2/keypairs/{ak}/secret", headers=api.alice)
    assert rotated.status == 200, await rotated.text()
    assert (
        await whoami(api, sign(api, "GET", "/v2/whoami", ak, (await rotated.json())["secret_key"]))
    ).status == 200


async def test_after_rotation_only_the_new_secret_signs(api: Api) -> None:
    carol = await new_keypair(api, "carol")
    ak, old = carol["access_key"], carol["secret_key"]
    assert (await whoami(api, sign(api, "GET", "/v2/whoami", ak, old))).status == 200  # cached now
    # Rotated by a signed request of its own (an empty POST is text/plain, as the client sends it).
    resp = await api.client.post(
        f"/v2/keypairs/{ak}/secret", headers=sign(api, "POST", f"/v2/keypairs/{ak}/secret", ak, old)
    )
    assert resp.status == 200, await resp.text()
    new = (await resp.json())["secret_key"]
    assert (await resp.json())["access_key"] == ak and new != old
    await assert_problem(await whoami(api, sign(api, "GET", "/v2/whoami", ak, old)), 401)
    assert (await whoami(api, sign(api, "GET", "/v2/whoami", ak, new))).status == 200


async def test_a_secret_rotated_elsewhere_stops_working_within_the_cache_ttl(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SignerCache, "TTL", 0.2)
    carol = await new_keypair(api, "carol")
    ak, old = carol["access_key"], carol["secret_key"]
    assert (await whoami(api, sign(api, "GET", "/v2/whoami", ak, old))).status == 200
    # Another manager rotated it: this one learns it only from the database.
    new = new_secret_key()
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Keypair)
            .where(Keypair.access_key == ak)
            .values(secret_key_enc=seal(new, cluster_secret(api)))
        )
    await asyncio.sleep(0.3)
    await assert_problem(await whoami(api, sign(api, "GET", "/v2/whoami", ak, old)), 401)
    assert (await whoami(api, sign(api, "GET", "/v2/whoami", ak, new))).status == 200


async def test_bearer_tokens_work_as_before(api: Api) -> None:
    carol = await new_keypair(api, "carol")
    resp = await whoami(api, bearer(carol["token"]))
    assert resp.status == 200 and (await resp.json())["user"] == "carol"
