"""Authentication, authorization and the problem+json shape of every error."""

from __future__ import annotations

import uuid

from tests.api.conftest import Api, bearer

PROBLEM = "application/problem+json"


async def assert_problem(resp: object, status: int) -> dict[str, object]:
    assert resp.status == status, await resp.text()  # type: ignore[attr-defined]
    assert resp.content_type == PROBLEM  # type: ignore[attr-defined]
    body: dict[str, object] = await resp.json(content_type=None)  # type: ignore[attr-defined]
    assert {"type", "title", "status", "detail"} <= body.keys()
    assert body["status"] == status
    assert "Traceback" not in str(body)
    return body


async def test_no_token_is_401(api: Api) -> None:
    resp = await api.client.get("/v2/sessions")
    await assert_problem(resp, 401)
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")


async def test_bad_token_is_401(api: Api) -> None:
    await assert_problem(await api.client.get("/v2/sessions", headers=bearer("nope")), 401)
    resp = await api.client.get("/v2/sessions", headers={"Authorization": "Basic abc"})
    await assert_problem(resp, 401)


async def test_user_cannot_create_keypairs(api: Api) -> None:
    resp = await api.client.post("/v2/keypairs", json={"user": "carol", "project": "p"}, headers=api.alice)
    await assert_problem(resp, 403)


async def test_unknown_route_and_wrong_method_are_problems(api: Api) -> None:
    await assert_problem(await api.client.get("/v2/nothing-here", headers=api.alice), 404)
    await assert_problem(await api.client.get("/v2/nothing-here"), 404)
    resp = await api.client.put("/v2/sessions", headers=api.alice)
    await assert_problem(resp, 405)


async def test_malformed_uuid_is_404(api: Api) -> None:
    for verb in ("get", "delete"):
        resp = await getattr(api.client, verb)("/v2/sessions/not-a-uuid", headers=api.alice)
        await assert_problem(resp, 404)
    for tail in ("history", "logs"):
        resp = await api.client.get(f"/v2/sessions/not-a-uuid/{tail}", headers=api.alice)
        await assert_problem(resp, 404)


async def test_missing_session_is_404(api: Api) -> None:
    await assert_problem(await api.client.get(f"/v2/sessions/{uuid.uuid4()}", headers=api.admin), 404)


async def test_bad_query_parameters_are_400(api: Api) -> None:
    for query in ("limit=0", "limit=501", "limit=x", "cursor=%%%", "status=SLEEPING", "type=cron"):
        await assert_problem(await api.client.get(f"/v2/sessions?{query}", headers=api.alice), 400)


async def test_healthz_is_public_and_ok(api: Api) -> None:
    resp = await api.client.get("/healthz")
    assert resp.status == 200
    body = await resp.json()
    assert body == {"status": "ok", "checks": {"postgres": "ok", "redis": "ok", "etcd": "ok"}}


async def test_openapi_lists_routes_and_schemas(api: Api) -> None:
    resp = await api.client.get("/v2/openapi.json")
    assert resp.status == 200
    doc = await resp.json()
    assert doc["openapi"].startswith("3.1")
    paths = doc["paths"]
    assert {"post", "get"} <= paths["/v2/sessions"].keys()
    assert {"get", "delete"} <= paths["/v2/sessions/{id}"].keys()
    for p in ("/v2/sessions/{id}/history", "/v2/sessions/{id}/logs", "/v2/keypairs", "/healthz"):
        assert p in paths
    schemas = doc["components"]["schemas"]
    for name in ("SessionCreateRequest", "SessionOut", "SessionList", "RetryPolicy", "ProblemDetails"):
        assert name in schemas
    create = paths["/v2/sessions"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SessionCreateRequest"
    }
    assert "201" in create["responses"] and "422" in create["responses"]
    # every $ref resolves
    for ref in _refs(doc):
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []
