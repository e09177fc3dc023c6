"""Bearer-token authentication: a token resolves to its keypair, user, project and domain."""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from sokovan.manager.api.problems import Problem
from sokovan.manager.context import ManagerContext
from sokovan.manager.repositories.tenancy import Principal, resolve_token

CTX_KEY = web.AppKey("ctx", ManagerContext)
PUBLIC_PATHS = frozenset({"/healthz", "/metrics", "/v2/openapi.json"})
_PRINCIPAL = web.RequestKey("principal", Principal)
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="sokovan"'}


def principal_of(request: web.Request) -> Principal:
    principal = request.get(_PRINCIPAL)
    if not isinstance(principal, Principal):  # a route registered without auth asked for it
        raise Problem(401, "Unauthorized", "this endpoint needs a bearer token", headers=_CHALLENGE)
    return principal


def require_admin(request: web.Request) -> Principal:
    principal = principal_of(request)
    if not principal.is_admin:
        raise Problem(403, "Forbidden", "this endpoint is for admins only")
    return principal


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    # Unknown routes fall through to their 404/405 problem without asking for a token.
    if request.path in PUBLIC_PATHS or request.match_info.http_exception is not None:
        return await handler(request)
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Problem(
            401, "Unauthorized", "missing bearer token (Authorization: Bearer <token>)", headers=_CHALLENGE
        )
    async with request.app[CTX_KEY].engine.connect() as conn:
        principal = await resolve_token(conn, token.strip())
    if principal is None:
        raise Problem(401, "Unauthorized", "invalid or inactive token", headers=_CHALLENGE)
    request[_PRINCIPAL] = principal
    return await handler(request)
