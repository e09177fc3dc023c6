"""`GET /v2/agents[/{id}]`: any authenticated caller may read the fleet."""

from __future__ import annotations

from aiohttp import web

from sokovan.common.types import AgentStatus
from sokovan.manager.api.admin_schemas import AgentList, AgentOut
from sokovan.manager.api.auth import CTX_KEY, principal_of
from sokovan.manager.api.common import found, json_response, query_csv, read_page
from sokovan.manager.api.openapi import Param, Route
from sokovan.manager.api.problems import Problem
from sokovan.manager.repositories import agents_read


async def list_agents(request: web.Request) -> web.Response:
    principal_of(request)
    statuses = [s.upper() for s in query_csv(request, "status")]
    bad = [s for s in statuses if s not in AgentStatus.__members__]
    if bad:
        raise Problem(400, "Bad query parameter", f"unknown agent status: {', '.join(bad)}")
    flt = agents_read.AgentFilter(statuses=statuses, scaling_group=request.query.get("scaling_group") or None)
    async with request.app[CTX_KEY].engine.connect() as conn:
        items, cursor = await read_page(
            request, lambda limit, after: agents_read.list_agents(conn, flt, limit, after)
        )
    return json_response(AgentList(items=[AgentOut.model_validate(i) for i in items], next_cursor=cursor))


async def get_agent(request: web.Request) -> web.Response:
    principal_of(request)
    agent_id = request.match_info["id"]
    async with request.app[CTX_KEY].engine.connect() as conn:
        view = await agents_read.get_agent(conn, agent_id)
    return json_response(found(AgentOut, view, "agent", repr(agent_id)))


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
            Param("limit", "query", "page size, 1-500 (default 100)", {"type": "integer"}),
            Param("cursor", "query", "next_cursor of the previous page"),
        ),
    ),
    Route(
        "GET",
        "/v2/agents/{id}",
        get_agent,
        "Read one agent",
        {200: AgentOut},
        params=(Param("id", "path", "agent id", required=True),),
    ),
]
