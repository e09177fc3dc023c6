"""`/v2/config/retry-policy-default` (the cluster retry default) and `/v2/config/node-lifecycle`
(heartbeat timings, seed 002), kept in etcd.

The value lives at `<prefix>/config/manager/retry_policy_default` as a bare RetryPolicy JSON
object. Any authenticated user may read the value in force; an admin replaces it whole (fields
left out take RetryPolicy's built-in defaults), validated first (422 otherwise). The write goes to etcd and
every manager's `EtcdConfigWatcher` picks it up; the answering manager applies it at once too,
so a read right after a write sees it.

The app reads the manager's live `ClusterConfig` when `create_app` is given one; otherwise (tests,
tools) `setup` starts a watcher of its own for the app's lifetime.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import structlog
from aiohttp import web
from pydantic import BaseModel

from sokovan.common.retry_policy import RetryPolicy
from sokovan.config.cluster import (
    NODE_LIFECYCLE,
    RETRY_POLICY_DEFAULT,
    ClusterConfig,
    EtcdConfigWatcher,
    NodeLifecycleSettings,
)
from sokovan.manager.api.auth import CTX_KEY, principal_of, require_admin
from sokovan.manager.api.common import json_response
from sokovan.manager.api.openapi import Route
from sokovan.manager.api.problems import parse_body
from sokovan.manager.repositories import admin as admin_repo

log = structlog.get_logger(__name__)

CLUSTER_CONFIG_KEY = web.AppKey("cluster_config", ClusterConfig)


def etcd_key(prefix: str, section: str = RETRY_POLICY_DEFAULT) -> str:
    """`<prefix>/config/<section>`, no leading slash (as the watcher reads it)."""
    return f"{prefix}/config/{section}"


def setup(app: web.Application, config: ClusterConfig | None = None) -> None:
    if config is not None:
        app[CLUSTER_CONFIG_KEY] = config  # the manager's own, kept live by its watcher
        return
    app[CLUSTER_CONFIG_KEY] = ClusterConfig()
    app.cleanup_ctx.append(_own_watcher)


async def _own_watcher(app: web.Application) -> AsyncIterator[None]:
    ctx = app[CTX_KEY]
    watcher = EtcdConfigWatcher(ctx.etcd, ctx.settings.etcd_prefix, app[CLUSTER_CONFIG_KEY])
    try:
        await watcher.load()
    except Exception as exc:  # etcd down at start: serve the defaults, the watcher catches up
        log.error("cluster_config.load_failed", error=repr(exc))
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop), name="api-config-watcher")
    try:
        yield
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5)


async def _replace(request: web.Request, section: str, model: type[BaseModel]) -> web.Response:
    """Validate the body as `model`, store it whole (omitted fields at their defaults) at the
    section's etcd key, apply it here at once, audit it, and answer the value in force."""
    admin = require_admin(request)
    value = await parse_body(request, model)
    ctx = request.app[CTX_KEY]
    raw = value.model_dump_json().encode()
    key = etcd_key(ctx.settings.etcd_prefix, section)
    await ctx.etcd.put(key.encode(), raw)
    config = request.app[CLUSTER_CONFIG_KEY]
    config.apply(section, raw)
    name = section.split("/")[-1]
    async with ctx.engine.begin() as conn:
        await admin_repo.audit(
            conn, admin.access_key, f"{name}.put", key, {name: value.model_dump(mode="json")}
        )
    return json_response(getattr(config, name))


async def get_retry_policy_default(request: web.Request) -> web.Response:
    principal_of(request)
    return json_response(request.app[CLUSTER_CONFIG_KEY].retry_policy_default)


async def put_retry_policy_default(request: web.Request) -> web.Response:
    return await _replace(request, RETRY_POLICY_DEFAULT, RetryPolicy)


async def get_node_lifecycle(request: web.Request) -> web.Response:
    principal_of(request)
    return json_response(request.app[CLUSTER_CONFIG_KEY].node_lifecycle)


async def put_node_lifecycle(request: web.Request) -> web.Response:
    return await _replace(request, NODE_LIFECYCLE, NodeLifecycleSettings)


ROUTES = [
    Route(
        "GET",
        "/v2/config/retry-policy-default",
        get_retry_policy_default,
        "The cluster retry default in force (etcd `<prefix>/config/manager/retry_policy_default`)",
        {200: RetryPolicy},
    ),
    Route(
        "PUT",
        "/v2/config/retry-policy-default",
        put_retry_policy_default,
        "Replace the cluster retry default whole (omitted fields take the built-in defaults); "
        "validated, then written to etcd, where every manager picks it up without a restart",
        {200: RetryPolicy},
        request=RetryPolicy,
        admin=True,
    ),
    Route(
        "GET",
        "/v2/config/node-lifecycle",
        get_node_lifecycle,
        "The node heartbeat timings in force (etcd `<prefix>/config/manager/node_lifecycle`)",
        {200: NodeLifecycleSettings},
    ),
    Route(
        "PUT",
        "/v2/config/node-lifecycle",
        put_node_lifecycle,
        "Replace the node heartbeat timings whole (omitted fields take their defaults); validated "
        "(the timeout must be longer than the interval), then written to etcd and applied live",
        {200: NodeLifecycleSettings},
        request=NodeLifecycleSettings,
        admin=True,
    ),
]
