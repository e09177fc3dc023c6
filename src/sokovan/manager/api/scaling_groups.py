"""`/v2/scaling-groups`: create and patch (admin), read and list (any authenticated caller).

Scheduler and selector names are checked against the provisioner's registry when the request is
validated: an unknown name is a 422 naming the known ones, never a silent fallback."""

from __future__ import annotations

from aiohttp import web

from sokovan.manager.api.admin_schemas import (
    ScalingGroupCreate,
    ScalingGroupList,
    ScalingGroupOut,
    ScalingGroupPatch,
)
from sokovan.manager.api.auth import CTX_KEY, principal_of, require_admin
from sokovan.manager.api.common import found, json_response, read_page
from sokovan.manager.api.openapi import Param, Route
from sokovan.manager.api.problems import Problem, parse_body
from sokovan.manager.repositories import admin as repo

NAME = Param("name", "path", "scaling group name", required=True)


async def create_scaling_group(request: web.Request) -> web.Response:
    admin = require_admin(request)
    body = await parse_body(request, ScalingGroupCreate)
    try:
        async with request.app[CTX_KEY].engine.begin() as conn:
            row = await repo.create_scaling_group(conn, body.values(), admin.access_key)
    except repo.AlreadyExists as exc:
        raise Problem(409, "Conflict", str(exc), slug="already-exists") from exc
    await request.app[CTX_KEY].admission_changed()
    return json_response(ScalingGroupOut.model_validate(row), 201)


async def patch_scaling_group(request: web.Request) -> web.Response:
    admin = require_admin(request)
    name = request.match_info["name"]
    body = await parse_body(request, ScalingGroupPatch)
    async with request.app[CTX_KEY].engine.begin() as conn:
        row = await repo.patch_scaling_group(conn, name, body.changes(), admin.access_key)
    await request.app[CTX_KEY].admission_changed()
    return json_response(found(ScalingGroupOut, row, "scaling group", repr(name)))


async def get_scaling_group(request: web.Request) -> web.Response:
    principal_of(request)
    name = request.match_info["name"]
    async with request.app[CTX_KEY].engine.connect() as conn:
        row = await repo.get_scaling_group(conn, name)
    return json_response(found(ScalingGroupOut, row, "scaling group", repr(name)))


async def list_scaling_groups(request: web.Request) -> web.Response:
    principal_of(request)
    async with request.app[CTX_KEY].engine.connect() as conn:
        rows, cursor = await read_page(
            request, lambda limit, after: repo.list_scaling_groups(conn, limit, after)
        )
    return json_response(
        ScalingGroupList(items=[ScalingGroupOut.model_validate(r) for r in rows], next_cursor=cursor)
    )


ROUTES = [
    Route(
        "POST",
        "/v2/scaling-groups",
        create_scaling_group,
        "Create a scaling group (409 if the name is taken)",
        {201: ScalingGroupOut, 409: None},
        request=ScalingGroupCreate,
        admin=True,
    ),
    Route(
        "GET",
        "/v2/scaling-groups",
        list_scaling_groups,
        "List scaling groups by name",
        {200: ScalingGroupList},
        params=(
            Param("limit", "query", "page size, 1-500 (default 100)", {"type": "integer"}),
            Param("cursor", "query", "next_cursor of the previous page"),
        ),
    ),
    Route(
        "GET",
        "/v2/scaling-groups/{name}",
        get_scaling_group,
        "Read one scaling group",
        {200: ScalingGroupOut},
        params=(NAME,),
    ),
    Route(
        "PATCH",
        "/v2/scaling-groups/{name}",
        patch_scaling_group,
        "Change some fields of a scaling group",
        {200: ScalingGroupOut},
        request=ScalingGroupPatch,
        params=(NAME,),
        admin=True,
    ),
]
