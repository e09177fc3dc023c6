"""`create_app(ctx)`: the REST v2 application, its middlewares and its routes."""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from sokovan.config.cluster import ClusterConfig
from sokovan.manager.api import (
    agents,
    config,
    console,
    deployments,
    events,
    fair_share,
    health,
    keypairs,
    metrics,
    policies,
    scaling_groups,
    sessions,
    whoami,
)
from sokovan.manager.api.auth import CTX_KEY, auth_middleware
from sokovan.manager.api.common import CONTROLLER_KEY, DEPLOYMENTS_KEY
from sokovan.manager.api.compat.routes import compat_routes
from sokovan.manager.api.conditional import conditional_middleware
from sokovan.manager.api.deadline import deadline_middleware
from sokovan.manager.api.openapi import Route, build_document
from sokovan.manager.api.problems import problem_middleware
from sokovan.manager.api.unavailable import unavailable_middleware
from sokovan.manager.context import ManagerContext
from sokovan.manager.controller import DeploymentController, SchedulingController

OPENAPI_KEY = web.AppKey("openapi", dict[str, Any])
# What `GET /` names as the API's version: the Backend.AI manager version whose client protocol the
# REST v2 API answers to (a client reads it to pick its protocol), not the package's version.
API_VERSION = "v9.20250722"
ROOT_INFO = {"version": API_VERSION, "api": "/v2", "console": console.PREFIX + "/"}


async def root(request: web.Request) -> web.Response:
    """`GET /`, without a token: a browser (Accept names text/html) is sent on to the console, any
    other client gets what the server is and where its API and console are."""
    if "text/html" in request.headers.get("Accept", ""):
        return web.Response(status=302, headers={"Location": ROOT_INFO["console"], "Vary": "Accept"})
    return web.json_response(ROOT_INFO, headers={"Vary": "Accept"})


@web.middleware
async def public_root(request: web.Request, handler: Handler) -> web.StreamResponse:
    """`/` is answered without authentication (auth_middleware, which comes after, knows only
    its own public paths); any other method on it falls through to its 405."""
    # the raw path: `/ui/%2e%2e` normalizes to `/` but is not a request for it (it is a 404)
    if request.raw_path == "/" and request.match_info.http_exception is None:
        return await root(request)
    return await handler(request)


async def openapi_json(request: web.Request) -> web.Response:
    return web.Response(text=json.dumps(request.app[OPENAPI_KEY]), content_type="application/json")


def all_routes() -> list[Route]:
    own = Route("GET", "/v2/openapi.json", openapi_json, "This document", {200: None}, auth=False)
    return [
        *sessions.ROUTES,
        *deployments.ROUTES,
        *keypairs.ROUTES,
        *policies.ROUTES,
        *scaling_groups.ROUTES,
        *agents.ROUTES,
        *fair_share.ROUTES,
        *config.ROUTES,
        *events.ROUTES,
        *health.ROUTES,
        *metrics.ROUTES,
        *whoami.ROUTES,
        own,
    ]


def _version() -> str:
    try:
        return version("sokovan")
    except PackageNotFoundError:  # pragma: no cover - the package is always installed
        return "0"


def create_app(ctx: ManagerContext, cluster_config: ClusterConfig | None = None) -> web.Application:
    """`cluster_config`: the manager's live settings (kept current by its etcd watcher); without
    one, the app follows etcd with a watcher of its own."""
    middlewares = [
        problem_middleware,
        unavailable_middleware,
        deadline_middleware,
        conditional_middleware,
        public_root,
        auth_middleware,
    ]
    app = web.Application(middlewares=middlewares)
    app[CTX_KEY] = ctx
    config.setup(app, cluster_config)
    app[CONTROLLER_KEY] = SchedulingController(ctx, app[config.CLUSTER_CONFIG_KEY])
    app[DEPLOYMENTS_KEY] = DeploymentController(ctx)
    events.setup(app)
    agents.setup(app)
    routes = all_routes()
    app[OPENAPI_KEY] = build_document(routes, _version())
    for route in [*routes, *compat_routes()]:
        app.router.add_route(route.method, route.path, route.handler)
    console.setup(app)
    app.router.add_get("/", root)
    return app
