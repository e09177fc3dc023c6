"""`create_app(ctx)`: the REST v2 application, its middlewares and its routes."""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from aiohttp import web

from sokovan.config.cluster import ClusterConfig
from sokovan.manager.api import (
    agents,
    config,
    console,
    deployments,
    events,
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
from sokovan.manager.api.openapi import Route, build_document
from sokovan.manager.api.problems import problem_middleware
from sokovan.manager.api.unavailable import unavailable_middleware
from sokovan.manager.context import ManagerContext
from sokovan.manager.controller import DeploymentController, SchedulingController

OPENAPI_KEY = web.AppKey("openapi", dict[str, Any])


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
    app = web.Application(middlewares=[problem_middleware, unavailable_middleware, auth_middleware])
    app[CTX_KEY] = ctx
    config.setup(app, cluster_config)
    app[CONTROLLER_KEY] = SchedulingController(ctx, app[config.CLUSTER_CONFIG_KEY])
    app[DEPLOYMENTS_KEY] = DeploymentController(ctx)
    events.setup(app)
    agents.setup(app)
    routes = all_routes()
    app[OPENAPI_KEY] = build_document(routes, _version())
    for route in routes:
        app.router.add_route(route.method, route.path, route.handler)
    console.setup(app)
    return app
