"""Authentication: who a request comes from, its keypair, user, project and domain.

Two schemes: `Authorization: Bearer <token>` (Sokovan's own; a token resolves to its keypair), and
`Authorization: BackendAI signMethod=HMAC-SHA256, credential=<access key>:<signature>`, a request
signed with the keypair's secret key the way Backend.AI's client signs (`compat.signature` checks
it, its date and that it is not a replay). Anything else is a 401.
"""

from __future__ import annotations

import hashlib
import time

from aiohttp import web
from aiohttp.typedefs import Handler

from sokovan.manager.api.compat.signature import SCHEME as SIGNED_SCHEME
from sokovan.manager.api.compat.signature import principal_from_signature
from sokovan.manager.api.console import is_console_path
from sokovan.manager.api.problems import Problem
from sokovan.manager.context import ManagerContext
from sokovan.manager.repositories.tenancy import Principal, resolve_token

CTX_KEY = web.AppKey("ctx", ManagerContext)
PUBLIC_PATHS = frozenset({"/healthz", "/metrics", "/v2/openapi.json"})
_PRINCIPAL = web.RequestKey("principal", Principal)
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="sokovan"'}


class _PrincipalCache:
    """Valid tokens seen in the last `ttl` seconds, so a busy client costs no lookup per request.

    Only successes are kept (an unknown token is looked up every time), keyed by the token's
    hash; a keypair deactivated in the database stops working within `ttl` seconds."""

    def __init__(self, ttl: float = 10.0, size: int = 10_000) -> None:
        self._ttl = ttl
        self._size = size
        self._items: dict[str, tuple[float, Principal]] = {}

    @staticmethod
    def _key(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def get(self, token: str) -> Principal | None:
        hit = self._items.get(self._key(token))
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, token: str, principal: Principal) -> None:
        if len(self._items) >= self._size:
            self._items.clear()
        self._items[self._key(token)] = (time.monotonic() + self._ttl, principal)


_CACHE = _PrincipalCache()


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
    public = request.path in PUBLIC_PATHS or is_console_path(request.path)
    if public or request.match_info.http_exception is not None:
        return await handler(request)
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == SIGNED_SCHEME:
        request[_PRINCIPAL] = await principal_from_signature(request, request.app[CTX_KEY])
        return await handler(request)
    if scheme.lower() != "bearer" or not token.strip():
        raise Problem(
            401,
            "Unauthorized",
            "missing bearer token (Authorization: Bearer <token>) or Backend.AI signature "
            "(Authorization: BackendAI signMethod=HMAC-SHA256, credential=<access key>:<signature>)",
            headers=_CHALLENGE,
        )
    principal = _CACHE.get(token.strip())
    if principal is None:
        async with request.app[CTX_KEY].engine.connect() as conn:
            principal = await resolve_token(conn, token.strip())
        if principal is not None:
            _CACHE.put(token.strip(), principal)
    if principal is None:
        raise Problem(401, "Unauthorized", "invalid or inactive token", headers=_CHALLENGE)
    request[_PRINCIPAL] = principal
    return await handler(request)
