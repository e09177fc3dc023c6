"""`/v2/agents`: any authenticated caller may read the fleet; admins act on it (node lifecycle,
seed 002: drain, undrain, disable, enable) and read an agent's history.

Actions go through the `NodeController`; reads through `repositories.agents_read`, the list's pages
from the worker's snapshot of the fleet (`agent_snapshot`, `agent_pages`). An action the
agent's current status does not allow is a 409 problem whose extra member `agent_status` names
that status.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel

from sokovan.common.problems import PROBLEM_BASE, PROBLEM_CONTENT_TYPE
from sokovan.common.types import AgentStatus
from sokovan.manager.api.admin_schemas import (
    AgentActionRequest,
    AgentDrainRequest,
    AgentHistoryItem,
    AgentHistoryList,
    AgentList,
    AgentOut,
)
from sokovan.manager.api.agent_pages import AgentPages
from sokovan.manager.api.agent_snapshot import AgentSnapshot
from sokovan.manager.api.auth import CTX_KEY, principal_of, require_admin
from sokovan.manager.api.common import PAGING, found, json_response, query_csv, query_limit, read_page
from sokovan.manager.api.events import HUB_KEY
from sokovan.manager.api.openapi import Param, Route
from sokovan.manager.api.problems import Problem, not_found, parse_body
from sokovan.manager.api.redact import shown_info
from sokovan.manager.controller.node_controller import NodeController, NodeRequest
from sokovan.manager.controller.node_rules import AgentStateConflict, NodeAction
from sokovan.manager.repositories import agents_read
from sokovan.manager.repositories.tenancy import Principal

M = TypeVar("M", bound=BaseModel)
NODES_KEY = web.AppKey("node_controller", NodeController)
SNAPSHOT_KEY = web.AppKey("agent_snapshot", AgentSnapshot)


def setup(app: web.Application) -> None:
    """The node controller the action routes use, and the snapshot the list's pages are served
    from (the app's context and event hub must be set)."""
    app[NODES_KEY] = NodeController(app[CTX_KEY])
    app[SNAPSHOT_KEY] = AgentSnapshot(AgentPages(), app[CTX_KEY].reads, app[HUB_KEY])
    app.on_cleanup.insert(0, _close_snapshot)  # before the hub it listens to


async def _close_snapshot(app: web.Application) -> None:
    await app[SNAPSHOT_KEY].close()


def _shown(agent: AgentOut, principal: Principal) -> AgentOut:
    """The agent as `principal` may see it: a user is not shown its RPC address, nor what its
    status_info says of addresses and other keypairs (`redact`)."""
    if principal.is_admin:
        return agent
    return agent.model_copy(
        update={"rpc_addr": None, "status_info": shown_info(agent.status_info, principal)}
    )


async def list_agents(request: web.Request) -> web.Response:
    principal = principal_of(request)
    statuses = [s.upper() for s in query_csv(request, "status")]
    bad = [s for s in statuses if s not in AgentStatus.__members__]
    if bad:
        raise Problem(400, "Bad query parameter", f"unknown agent status: {', '.join(bad)}")
    flt = agents_read.AgentFilter(statuses=statuses, scaling_group=request.query.get("scaling_group") or None)
    limit, cursor = query_limit(request), request.query.get("cursor") or None
    try:
        return await request.app[SNAPSHOT_KEY].page(request, principal, flt, limit, cursor)
    except ValueError as exc:
        raise Problem(400, "Bad query parameter", f"cursor: {exc}") from exc


async def _view(request: web.Request, agent_id: str) -> AgentOut:
    async with request.app[CTX_KEY].reads.connect() as conn:
        view = await agents_read.get_agent(conn, agent_id)
    return found(AgentOut, view, "agent", agent_id)


async def get_agent(request: web.Request) -> web.Response:
    principal = principal_of(request)
    return json_response(_shown(await _view(request, request.match_info["id"]), principal))


async def agent_history(request: web.Request) -> web.Response:
    require_admin(request)
    agent_id = request.match_info["id"]
    async with request.app[CTX_KEY].reads.connect() as conn:
        if not await agents_read.agent_exists(conn, agent_id):
            raise not_found("agent", agent_id)
        items, cursor = await read_page(
            request, lambda limit, after: agents_read.list_history(conn, agent_id, limit, after)
        )
    return json_response(
        AgentHistoryList(items=[AgentHistoryItem.model_validate(i) for i in items], next_cursor=cursor)
    )


async def _optional_body(request: web.Request, model: type[M]) -> M:
    """The body as `model`, or the model's defaults when there is no body at all."""
    if not (await request.read()).strip():
        return model()
    return await parse_body(request, model)


def _conflict(exc: AgentStateConflict) -> web.Response:
    body = {
        "type": PROBLEM_BASE + exc.slug,
        "title": exc.title,
        "status": exc.status,
        "detail": exc.detail,
        "agent_status": exc.agent_status.value,
    }
    return web.Response(status=exc.status, text=json.dumps(body), content_type=PROBLEM_CONTENT_TYPE)


async def _act(request: web.Request, principal: Principal, node_request: NodeRequest) -> web.Response:
    agent_id = request.match_info["id"]
    try:
        await request.app[NODES_KEY].act(principal, agent_id, node_request)
    except AgentStateConflict as exc:
        return _conflict(exc)
    request.app[SNAPSHOT_KEY].touch(agent_id)
    return json_response(await _view(request, agent_id))


async def drain_agent(request: web.Request) -> web.Response:
    principal = require_admin(request)
    body = await _optional_body(request, AgentDrainRequest)
    return await _act(request, principal, NodeRequest(NodeAction.DRAIN, body.reason, body.urgent))


def _simple(action: NodeAction) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        principal = require_admin(request)
        body = await _optional_body(request, AgentActionRequest)
        return await _act(request, principal, NodeRequest(action, body.reason))

    handler.__name__ = f"{action.value}_agent"
    return handler


undrain_agent = _simple(NodeAction.UNDRAIN)
disable_agent = _simple(NodeAction.DISABLE)
enable_agent = _simple(NodeAction.ENABLE)

AGENT_ID = Param("id", "path", "agent id", required=True)
_CONFLICT = (
    "; 409 (problem+json with `agent_status`, the agent's current status) when its status does not allow it"
)

ROUTES = [
    Route(
        "GET",
        "/v2/agents",
        list_agents,
        "List agents by id, with derived occupancy",
        {200: AgentList},
        params=(
            Param("status", "query", "comma-separated agent statuses"),
            Param("scaling_group", "query", "only this scaling group's agents"),
            *PAGING,
        ),
    ),
    Route("GET", "/v2/agents/{id}", get_agent, "Read one agent", {200: AgentOut}, params=(AGENT_ID,)),
    Route(
        "GET",
        "/v2/agents/{id}/history",
        agent_history,
        "The agent's status changes (what moved it, why, who), newest first",
        {200: AgentHistoryList},
        params=(AGENT_ID, *PAGING),
        admin=True,
    ),
    Route(
        "POST",
        "/v2/agents/{id}/drain",
        drain_agent,
        "Drain: READY or DEGRADED → DRAINING (no new kernels; DRAINED once none is left). Urgent: "
        "also terminate its sessions (cause NODE_DRAINED), allowed on a DRAINING agent too" + _CONFLICT,
        {200: AgentOut, 409: None},
        request=AgentDrainRequest,
        body_required=False,
        params=(AGENT_ID,),
        admin=True,
    ),
    Route(
        "POST",
        "/v2/agents/{id}/undrain",
        undrain_agent,
        "Undrain: DRAINING or DRAINED → READY" + _CONFLICT,
        {200: AgentOut, 409: None},
        request=AgentActionRequest,
        body_required=False,
        params=(AGENT_ID,),
        admin=True,
    ),
    Route(
        "POST",
        "/v2/agents/{id}/disable",
        disable_agent,
        "Disable: any status → DOWN at once, its kernels ended (AGENT_TRANSIENT); it stays DOWN "
        "until enabled" + _CONFLICT,
        {200: AgentOut, 409: None},
        request=AgentActionRequest,
        body_required=False,
        params=(AGENT_ID,),
        admin=True,
    ),
    Route(
        "POST",
        "/v2/agents/{id}/enable",
        enable_agent,
        "Enable: DOWN or FAILED → BOOTING (READY at its next healthy heartbeat)" + _CONFLICT,
        {200: AgentOut, 409: None},
        request=AgentActionRequest,
        body_required=False,
        params=(AGENT_ID,),
        admin=True,
    ),
]
