"""`POST /v2/keypairs` (admin)."""

from __future__ import annotations

from aiohttp import web

from sokovan.manager.api.auth import CTX_KEY, require_admin
from sokovan.manager.api.common import json_response
from sokovan.manager.api.openapi import Route
from sokovan.manager.api.problems import Problem, parse_body
from sokovan.manager.api.schemas import KeypairCreateRequest, KeypairCreateResponse
from sokovan.manager.repositories.tenancy import TenancyError, create_keypair


async def create_keypair_route(request: web.Request) -> web.Response:
    admin = require_admin(request)
    body = await parse_body(request, KeypairCreateRequest)
    try:
        async with request.app[CTX_KEY].engine.begin() as conn:
            access_key, token = await create_keypair(
                conn,
                user=body.user,
                project=body.project,
                domain=body.domain,
                role=body.role,
                resource_policy=body.resource_policy,
                actor=admin.access_key,
            )
    except TenancyError as exc:
        raise Problem(422, "Unknown reference", str(exc), slug="unknown-reference") from exc
    return json_response(KeypairCreateResponse(access_key=access_key, token=token), 201)


ROUTES = [
    Route(
        "POST",
        "/v2/keypairs",
        create_keypair_route,
        "Create a keypair (and its user and project if missing); the token is shown once",
        {201: KeypairCreateResponse},
        request=KeypairCreateRequest,
        admin=True,
    ),
]
