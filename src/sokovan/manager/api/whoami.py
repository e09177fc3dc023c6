"""`GET /v2/whoami`: who the bearer token belongs to (the console asks it at sign-in)."""

from __future__ import annotations

from aiohttp import web
from pydantic import BaseModel

from sokovan.common.types import Role
from sokovan.manager.api.auth import principal_of
from sokovan.manager.api.common import json_response
from sokovan.manager.api.openapi import Route


class WhoAmI(BaseModel):
    """The caller's keypair, user, project, domain and role."""

    access_key: str
    user: str
    project: str
    domain: str
    role: Role


async def whoami(request: web.Request) -> web.Response:
    principal = principal_of(request)
    return json_response(
        WhoAmI(
            access_key=principal.access_key,
            user=principal.user_name,
            project=principal.project_name,
            domain=principal.domain_name,
            role=principal.role,
        )
    )


ROUTES = [
    Route(
        "GET",
        "/v2/whoami",
        whoami,
        "The caller: its access key, user, project, domain and role",
        {200: WhoAmI},
    ),
]
