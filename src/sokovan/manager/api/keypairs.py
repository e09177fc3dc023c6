"""`POST /v2/keypairs` (admin) and `POST /v2/keypairs/{access_key}/secret` (a new secret key).

A keypair's token and its secret key (for Backend.AI's request signatures) are shown once, when
made; the secret is stored sealed under the cluster secret (`common.secret_box`).
"""

from __future__ import annotations

from aiohttp import web

from sokovan.common.secret_box import new_secret_key, seal
from sokovan.manager.api.auth import CTX_KEY, principal_of, require_admin
from sokovan.manager.api.common import json_response
from sokovan.manager.api.compat.signature import SIGNERS
from sokovan.manager.api.openapi import Param, Route
from sokovan.manager.api.problems import Problem, not_found, parse_body
from sokovan.manager.api.schemas import KeypairCreateRequest, KeypairCreateResponse, KeypairSecretResponse
from sokovan.manager.repositories.tenancy import TenancyError, create_keypair, keypair_user, set_secret_key

ACCESS_KEY = Param("access_key", "path", "the keypair's access key", required=True)


async def create_keypair_route(request: web.Request) -> web.Response:
    admin = require_admin(request)
    body = await parse_body(request, KeypairCreateRequest)
    cluster_secret = request.app[CTX_KEY].settings.cluster_secret
    secret_key = sealed = None
    if cluster_secret:  # a manager always has one; an app built without it makes keypairs without
        secret_key = new_secret_key()
        sealed = seal(secret_key, cluster_secret)
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
                secret_key_enc=sealed,
            )
    except TenancyError as exc:
        raise Problem(422, "Unknown reference", str(exc), slug="unknown-reference") from exc
    return json_response(
        KeypairCreateResponse(access_key=access_key, token=token, secret_key=secret_key), 201
    )


async def rotate_secret_route(request: web.Request) -> web.Response:
    caller = principal_of(request)
    access_key = request.match_info["access_key"]
    cluster_secret = request.app[CTX_KEY].settings.cluster_secret
    if not cluster_secret:
        raise Problem(
            503, "Service Unavailable", "this manager has no cluster secret to seal a secret key with"
        )
    secret_key = new_secret_key()
    async with request.app[CTX_KEY].engine.begin() as conn:
        owner = await keypair_user(conn, access_key)
        # another user's keypair is not found, as an unknown one: a user cannot learn which keys exist
        if owner is None or (not caller.is_admin and owner != caller.user_id):
            raise not_found("keypair", access_key)
        await set_secret_key(conn, access_key, seal(secret_key, cluster_secret), caller.access_key)
    SIGNERS.forget(access_key)  # this process at once; the others within their cache's TTL
    return json_response(KeypairSecretResponse(access_key=access_key, secret_key=secret_key))


ROUTES = [
    Route(
        "POST",
        "/v2/keypairs",
        create_keypair_route,
        "Create a keypair (and its user and project if missing); the token and secret key are shown once",
        {201: KeypairCreateResponse},
        request=KeypairCreateRequest,
        admin=True,
    ),
    Route(
        "POST",
        "/v2/keypairs/{access_key}/secret",
        rotate_secret_route,
        "Give a keypair a new secret key, shown once (its old one signs nothing any more); "
        "users: only their own keypairs",
        {200: KeypairSecretResponse},
        params=(ACCESS_KEY,),
    ),
]
