"""`/v2/deployments` and `/v2/routes`: create (or dry-run), read, list, update (scale,
autoscaling, a new revision), roll back and destroy deployments, make a new access token; list
their routes; both histories.

Writes go through the `DeploymentController`; reads through `repositories.deployments_read`. A
deployment's `endpoint` comes from the app proxies registered on Redis: a Redis that does not
answer costs the endpoint (null), never the request.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.bus.routing import proxy_urls
from sokovan.common.types import EndpointLifecycle, RouteStatus
from sokovan.manager.api.auth import CTX_KEY, principal_of
from sokovan.manager.api.common import (
    DEPLOYMENTS_KEY,
    PAGING,
    found,
    json_response,
    path_uuid,
    query_bool,
    query_csv,
    read_page,
)
from sokovan.manager.api.deployment_schemas import (
    DeploymentCreated,
    DeploymentDefinition,
    DeploymentDryRunResponse,
    DeploymentList,
    DeploymentOut,
    HandlerRun,
    HandlerRunList,
    RouteList,
    RouteOut,
    TokenOut,
)
from sokovan.manager.api.openapi import Param, Route
from sokovan.manager.api.problems import Problem, not_found, parse_body
from sokovan.manager.controller.deployment_spec import DeploymentCreateRequest, DeploymentUpdateRequest
from sokovan.manager.repositories import deployments_read
from sokovan.manager.repositories.tenancy import Principal

log = structlog.get_logger(__name__)


def _id(request: web.Request, what: str = "deployment") -> uuid.UUID:
    return path_uuid(request, what=what)


def _statuses(request: web.Request, allowed: type[EndpointLifecycle] | type[RouteStatus]) -> list[str]:
    statuses = [s.upper() for s in query_csv(request, "status")]
    bad = [s for s in statuses if s not in allowed.__members__]
    if bad:
        raise Problem(400, "Bad query parameter", f"unknown status: {', '.join(bad)}")
    return statuses


async def _proxy_url(request: web.Request) -> str | None:
    ctx = request.app[CTX_KEY]
    if not ctx.settings.cluster_secret:
        return None
    try:
        urls = await proxy_urls(ctx.redis, ctx.settings.etcd_prefix, ctx.settings.cluster_secret)
    except Exception as exc:
        log.warning("could not read the app proxies", error=repr(exc))
        return None
    return urls[0] if urls else None


async def _deployment_or_404(
    request: web.Request, deployment_id: uuid.UUID, principal: Principal
) -> DeploymentOut:
    proxy = await _proxy_url(request)
    async with request.app[CTX_KEY].engine.connect() as conn:
        view = await deployments_read.get_deployment(conn, deployment_id, principal, proxy)
    return found(DeploymentOut, view, "deployment", deployment_id)


async def create_deployment(request: web.Request) -> web.Response:
    principal = principal_of(request)
    dry_run = query_bool(request, "dry_run")
    spec = await parse_body(request, DeploymentCreateRequest)
    controller = request.app[DEPLOYMENTS_KEY]
    if dry_run:
        plan = await controller.dry_run(principal, spec)
        return json_response(
            DeploymentDryRunResponse(
                definition=DeploymentDefinition.model_validate(plan.definition),
                placeable=plan.placeable,
                pending_reason=plan.pending_reason,
            )
        )
    made = await controller.create(principal, spec)
    view = await _deployment_or_404(request, made.id, principal)
    answer = DeploymentCreated.model_validate({**dict(view), "token": made.token})
    # The token is shown here only; an open deployment's answer has none.
    text = answer.model_dump_json(exclude={"token"} if made.token is None else None)
    return web.Response(status=201, text=text, content_type="application/json")


async def get_deployment(request: web.Request) -> web.Response:
    return json_response(await _deployment_or_404(request, _id(request), principal_of(request)))


async def list_deployments(request: web.Request) -> web.Response:
    principal = principal_of(request)
    statuses = _statuses(request, EndpointLifecycle)
    owner = request.query.get("owner") or None
    if owner is not None and not principal.is_admin and owner != principal.user_name:
        raise Problem(403, "Forbidden", "only admins may list other users' deployments")
    flt = deployments_read.DeploymentFilter(statuses=statuses, owner=owner)
    proxy = await _proxy_url(request)
    async with request.app[CTX_KEY].engine.connect() as conn:
        items, cursor = await read_page(
            request,
            lambda limit, after: deployments_read.list_deployments(conn, principal, flt, limit, after, proxy),
        )
    return json_response(
        DeploymentList(items=[DeploymentOut.model_validate(i) for i in items], next_cursor=cursor)
    )


async def update_deployment(request: web.Request) -> web.Response:
    principal = principal_of(request)
    deployment_id = _id(request)
    body = await parse_body(request, DeploymentUpdateRequest)
    done = await request.app[DEPLOYMENTS_KEY].update(principal, deployment_id, body)
    status = 202 if done.revision is not None else 200
    return json_response(await _deployment_or_404(request, deployment_id, principal), status)


async def rollback_deployment(request: web.Request) -> web.Response:
    principal = principal_of(request)
    deployment_id = _id(request)
    await request.app[DEPLOYMENTS_KEY].rollback(principal, deployment_id)
    return json_response(await _deployment_or_404(request, deployment_id, principal), 202)


async def new_token(request: web.Request) -> web.Response:
    token = await request.app[DEPLOYMENTS_KEY].rotate_token(principal_of(request), _id(request))
    return json_response(TokenOut(token=token))


async def destroy_deployment(request: web.Request) -> web.Response:
    principal = principal_of(request)
    deployment_id = _id(request)
    await request.app[DEPLOYMENTS_KEY].destroy(principal, deployment_id)
    return json_response(await _deployment_or_404(request, deployment_id, principal), 202)


async def deployment_routes(request: web.Request) -> web.Response:
    principal = principal_of(request)
    deployment_id = _id(request)
    statuses = _statuses(request, RouteStatus)
    async with request.app[CTX_KEY].engine.connect() as conn:
        if not await deployments_read.deployment_is_visible(conn, deployment_id, principal):
            raise not_found("deployment", deployment_id)
        items, cursor = await read_page(
            request,
            lambda limit, after: deployments_read.list_routes(conn, deployment_id, statuses, limit, after),
        )
    return json_response(RouteList(items=[RouteOut.model_validate(i) for i in items], next_cursor=cursor))


async def deployment_history(request: web.Request) -> web.Response:
    return await _history(
        request,
        "deployment",
        deployments_read.deployment_is_visible,
        deployments_read.list_deployment_history,
    )


async def route_history(request: web.Request) -> web.Response:
    return await _history(
        request, "route", deployments_read.route_is_visible, deployments_read.list_route_history
    )


async def _history(
    request: web.Request,
    what: str,
    is_visible: Callable[[AsyncConnection, uuid.UUID, Principal], Awaitable[bool]],
    list_history: Callable[[AsyncConnection, uuid.UUID, int, str | None], Awaitable[deployments_read.Page]],
) -> web.Response:
    """The handler runs of the deployment or route `{id}` (`what`), if the caller may see it."""
    principal = principal_of(request)
    ident = _id(request, what)
    async with request.app[CTX_KEY].engine.connect() as conn:
        if not await is_visible(conn, ident, principal):
            raise not_found(what, ident)
        items, cursor = await read_page(request, lambda limit, after: list_history(conn, ident, limit, after))
    return json_response(
        HandlerRunList(items=[HandlerRun.model_validate(i) for i in items], next_cursor=cursor)
    )


DEPLOYMENT_ID = Param("id", "path", "deployment id (UUID)", {"type": "string", "format": "uuid"}, True)
ROUTE_ID = Param("id", "path", "route id (UUID)", {"type": "string", "format": "uuid"}, True)

ROUTES = [
    Route(
        "POST",
        "/v2/deployments",
        create_deployment,
        "Create a deployment (PENDING) and answer its access token once (unless open_to_public); "
        "with dry_run=true, run the same checks and answer the definition its type's generator "
        "makes and whether a replica could be placed now, writing nothing",
        {201: DeploymentCreated, 200: DeploymentDryRunResponse, 409: None},
        request=DeploymentCreateRequest,
        params=(
            Param(
                "dry_run",
                "query",
                "validate and answer the generated definition; write nothing",
                {"type": "boolean"},
            ),
        ),
    ),
    Route(
        "GET",
        "/v2/deployments",
        list_deployments,
        "List deployments, newest first",
        {200: DeploymentList},
        params=(
            Param("status", "query", "comma-separated statuses (EndpointLifecycle)"),
            Param("owner", "query", "user name (admins only)"),
            *PAGING,
        ),
    ),
    Route(
        "GET",
        "/v2/deployments/{id}",
        get_deployment,
        "Read one deployment",
        {200: DeploymentOut},
        params=(DEPLOYMENT_ID,),
    ),
    Route(
        "PATCH",
        "/v2/deployments/{id}",
        update_deployment,
        "Update: replicas (409 while autoscaling is set), autoscaling, drain_timeout (200); a new "
        "definition (image, model, command, environ, resources, health_check) starts a new revision "
        "rolled out by strategy (202, DEPLOYING). 409 once it is being destroyed",
        {200: DeploymentOut, 202: DeploymentOut, 409: None},
        request=DeploymentUpdateRequest,
        params=(DEPLOYMENT_ID,),
    ),
    Route(
        "POST",
        "/v2/deployments/{id}/rollback",
        rollback_deployment,
        "Roll back to the last good revision: the running update's, or (none running) a new "
        "revision with the previous definition. 409 when there is nothing to roll back to",
        {202: DeploymentOut, 409: None},
        params=(DEPLOYMENT_ID,),
    ),
    Route(
        "POST",
        "/v2/deployments/{id}/token",
        new_token,
        "A new access token, shown once (the old one stops working within seconds); an "
        "open_to_public deployment gets one and is closed",
        {200: TokenOut, 409: None},
        params=(DEPLOYMENT_ID,),
    ),
    Route(
        "DELETE",
        "/v2/deployments/{id}",
        destroy_deployment,
        "Destroy: DESTROYING, then DESTROYED once every replica is gone (idempotent)",
        {202: DeploymentOut},
        params=(DEPLOYMENT_ID,),
    ),
    Route(
        "GET",
        "/v2/deployments/{id}/routes",
        deployment_routes,
        "The deployment's routes (one per replica), oldest first",
        {200: RouteList},
        params=(DEPLOYMENT_ID, Param("status", "query", "comma-separated statuses (RouteStatus)"), *PAGING),
    ),
    Route(
        "GET",
        "/v2/deployments/{id}/history",
        deployment_history,
        "Every handler run that touched the deployment, oldest first",
        {200: HandlerRunList},
        params=(DEPLOYMENT_ID, *PAGING),
    ),
    Route(
        "GET",
        "/v2/routes/{id}/history",
        route_history,
        "Every handler run that touched the route, oldest first",
        {200: HandlerRunList},
        params=(ROUTE_ID, *PAGING),
    ),
]
