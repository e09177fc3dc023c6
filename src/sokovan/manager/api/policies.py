"""Resource limits (admin): `PUT|GET /v2/resource-policies/{name}`, `PUT /v2/projects/{name}`,
`PUT /v2/domains/{name}`. Every write leaves an audit row."""

from __future__ import annotations

from aiohttp import web
from sqlalchemy import select

from sokovan.db.models import Keypair
from sokovan.manager.api.admin_schemas import (
    DomainOut,
    ProjectOut,
    ResourcePolicyOut,
    ResourcePolicyPut,
    TenantLimitsPut,
)
from sokovan.manager.api.auth import CTX_KEY, principal_of, require_admin
from sokovan.manager.api.common import found, json_response, path_name
from sokovan.manager.api.openapi import Param, Route
from sokovan.manager.api.problems import Problem, not_found, parse_body
from sokovan.manager.repositories import admin as repo
from sokovan.manager.repositories.tenancy import DEFAULT_DOMAIN, TenancyError

NAME = Param("name", "path", "name", required=True)


async def put_resource_policy(request: web.Request) -> web.Response:
    admin = require_admin(request)
    name = path_name(request, "resource policy")
    body = await parse_body(request, ResourcePolicyPut)
    async with request.app[CTX_KEY].engine.begin() as conn:
        row = await repo.put_resource_policy(conn, name, body.model_dump(), admin.access_key)
    await request.app[CTX_KEY].admission_changed()
    return json_response(ResourcePolicyOut.model_validate(row))


async def get_resource_policy(request: web.Request) -> web.Response:
    """Admins read any policy; a user only the one its own keypair is bound to."""
    principal = principal_of(request)
    name = request.match_info["name"]
    async with request.app[CTX_KEY].engine.connect() as conn:
        if not principal.is_admin:
            own = await conn.scalar(
                select(Keypair.resource_policy).where(Keypair.access_key == principal.access_key)
            )
            if own != name:
                raise not_found("resource policy", repr(name))
        row = await repo.get_resource_policy(conn, name)
    return json_response(found(ResourcePolicyOut, row, "resource policy", repr(name)))


async def put_domain(request: web.Request) -> web.Response:
    admin = require_admin(request)
    name = path_name(request, "domain")
    body = await parse_body(request, TenantLimitsPut)
    async with request.app[CTX_KEY].engine.begin() as conn:
        row = await repo.put_domain(conn, name, body.changes(), admin.access_key)
    await request.app[CTX_KEY].admission_changed()
    return json_response(DomainOut.model_validate(row))


async def put_project(request: web.Request) -> web.Response:
    admin = require_admin(request)
    name = path_name(request, "project")
    domain = request.query.get("domain") or DEFAULT_DOMAIN
    body = await parse_body(request, TenantLimitsPut)
    try:
        async with request.app[CTX_KEY].engine.begin() as conn:
            row = await repo.put_project(conn, name, domain, body.changes(), admin.access_key)
    except TenancyError as exc:
        raise Problem(422, "Unknown reference", str(exc), slug="unknown-reference") from exc
    await request.app[CTX_KEY].admission_changed()
    return json_response(ProjectOut.model_validate({**row, "domain": row["domain_name"]}))


_LIMITS_NOTE = "fields left out keep their value (defaults when created), null clears"

ROUTES = [
    Route(
        "PUT",
        "/v2/resource-policies/{name}",
        put_resource_policy,
        "Create or replace a keypair resource policy (a count left out or null is unlimited)",
        {200: ResourcePolicyOut},
        request=ResourcePolicyPut,
        params=(NAME,),
        admin=True,
    ),
    Route(
        "GET",
        "/v2/resource-policies/{name}",
        get_resource_policy,
        "Read a keypair resource policy (users: only their own keypair's)",
        {200: ResourcePolicyOut},
        params=(NAME,),
    ),
    Route(
        "PUT",
        "/v2/domains/{name}",
        put_domain,
        f"Create a domain if missing and set its limits and retry default; {_LIMITS_NOTE}",
        {200: DomainOut},
        request=TenantLimitsPut,
        params=(NAME,),
        admin=True,
    ),
    Route(
        "PUT",
        "/v2/projects/{name}",
        put_project,
        f"Create a project in an existing domain if missing and set its limits; {_LIMITS_NOTE}",
        {200: ProjectOut},
        request=TenantLimitsPut,
        params=(NAME, Param("domain", "query", "the project's domain (default: default)")),
        admin=True,
    ),
]
