"""`/v2/sessions`: create, read, list, terminate, retry attempts and history (logs: `session_logs`).

A path's `{id}` is a session id, name or id prefix (`session_ref`)."""

from __future__ import annotations

import datetime as dt
import uuid

import structlog
from aiohttp import web
from pydantic import BaseModel, Field

from sokovan.common.types import SessionResult, SessionStatus, SessionType
from sokovan.manager.api import session_logs
from sokovan.manager.api.auth import CTX_KEY, principal_of
from sokovan.manager.api.common import (
    CONTROLLER_KEY,
    PAGING,
    found,
    json_response,
    query_bool,
    query_csv,
    read_page,
)
from sokovan.manager.api.openapi import Param, Route
from sokovan.manager.api.problems import Problem, not_found, parse_body
from sokovan.manager.api.redact import shown_info
from sokovan.manager.api.schemas import (
    DryRunResponse,
    HistoryItem,
    HistoryList,
    SessionCreateRequest,
    SessionList,
    SessionOut,
)
from sokovan.manager.api.session_ref import SESSION_REF, path_session_id
from sokovan.manager.repositories import history_read, sessions_read
from sokovan.manager.repositories.tenancy import Principal

log = structlog.get_logger(__name__)


class AttemptOut(BaseModel):
    """One attempt of a retry chain: the original session (retry_count 0) or one of its retries."""

    id: uuid.UUID
    status: SessionStatus
    result: SessionResult | None
    cause: str | None = Field(description="status_info.cause: what ended it (null while running, or success)")
    retry_count: int
    retry_cause: str | None = Field(description="the failure of the previous attempt that created it")
    created_at: dt.datetime
    terminated_at: dt.datetime | None


class AttemptList(BaseModel):
    items: list[AttemptOut] = Field(description="the whole chain, oldest first")
    next_cursor: str | None


async def _session_or_404(request: web.Request, session_id: uuid.UUID, principal: Principal) -> SessionOut:
    async with request.app[CTX_KEY].reads.connect() as conn:
        view = await sessions_read.get_session(conn, session_id, principal)
    return _shown(found(SessionOut, view, "session", session_id), principal)


def _shown(session: SessionOut, principal: Principal) -> SessionOut:
    """The session as `principal` may see it (`redact`: no agent addresses, no other access key)."""
    if principal.is_admin:
        return session
    return session.model_copy(update={"status_info": shown_info(session.status_info, principal)})


async def create_session(request: web.Request) -> web.Response:
    principal = principal_of(request)
    dry_run = query_bool(request, "dry_run")
    spec = await parse_body(request, SessionCreateRequest)
    if dry_run:
        result = await request.app[CONTROLLER_KEY].dry_run(principal, spec)
        return json_response(
            DryRunResponse(
                placeable=result.placeable,
                agents=list(result.agents),
                pending_reason=result.pending_reason,
                preempts=list(result.preempts),
            )
        )
    outcome = await request.app[CONTROLLER_KEY].create_session(principal, spec)
    if outcome.view is not None:  # what this request wrote: no need to read it back
        return json_response(_shown(SessionOut.model_validate(outcome.view), principal), 201)
    return json_response(await _session_or_404(request, outcome.session_id, principal), 200)


async def get_session(request: web.Request) -> web.Response:
    principal = principal_of(request)
    session_id = await path_session_id(request, principal)
    return json_response(await _session_or_404(request, session_id, principal))


async def list_sessions(request: web.Request) -> web.Response:
    principal = principal_of(request)
    statuses = [s.upper() for s in query_csv(request, "status")]
    types = [t.lower() for t in query_csv(request, "type")]
    bad = [s for s in statuses if s not in SessionStatus.__members__] + [
        t for t in types if t not in {m.value for m in SessionType}
    ]
    if bad:
        raise Problem(400, "Bad query parameter", f"unknown status or type: {', '.join(bad)}")
    owner = request.query.get("owner") or None
    if owner is not None and not principal.is_admin and owner != principal.user_name:
        raise Problem(403, "Forbidden", "only admins may list other users' sessions")
    flt = sessions_read.SessionFilter(statuses=statuses, types=types, owner=owner)
    async with request.app[CTX_KEY].reads.connect() as conn:
        items, cursor = await read_page(
            request, lambda limit, after: sessions_read.list_sessions(conn, principal, flt, limit, after)
        )
    shown = [_shown(SessionOut.model_validate(i), principal) for i in items]
    return json_response(SessionList(items=shown, next_cursor=cursor))


async def terminate_session(request: web.Request) -> web.Response:
    principal = principal_of(request)
    session_id = await path_session_id(request, principal)
    forced = query_bool(request, "forced")
    await request.app[CONTROLLER_KEY].terminate_session(principal, session_id, forced)
    return json_response(await _session_or_404(request, session_id, principal), 202)


async def session_history(request: web.Request) -> web.Response:
    principal = principal_of(request)
    session_id = await path_session_id(request, principal)
    async with request.app[CTX_KEY].reads.connect() as conn:
        if not await sessions_read.session_is_visible(conn, session_id, principal):
            raise not_found("session", session_id)
        moves_only = not query_bool(request, "all")  # runs that moved nothing are noise to a reader
        items, cursor = await read_page(
            request,
            lambda limit, after: history_read.list_history(
                conn, session_id, limit, after, moves_only=moves_only
            ),
        )
    return json_response(
        HistoryList(items=[HistoryItem.model_validate(i) for i in items], next_cursor=cursor)
    )


async def session_attempts(request: web.Request) -> web.Response:
    principal = principal_of(request)
    session_id = await path_session_id(request, principal)
    async with request.app[CTX_KEY].reads.connect() as conn:
        items = await sessions_read.list_attempts(conn, session_id, principal)
    if items is None:
        raise not_found("session", session_id)
    return json_response(AttemptList(items=[AttemptOut.model_validate(i) for i in items], next_cursor=None))


ROUTES = [
    Route(
        "POST",
        "/v2/sessions",
        create_session,
        "Create a session (200 with the existing one for a repeated creation_id); with dry_run=true, "
        "admit it the same way and answer where it would be placed now, writing nothing",
        {201: SessionOut, 200: (SessionOut, DryRunResponse), 429: None},
        request=SessionCreateRequest,
        params=(
            Param(
                "dry_run",
                "query",
                "validate and compute a placement against the current cluster; write nothing",
                {"type": "boolean"},
            ),
        ),
    ),
    Route(
        "GET",
        "/v2/sessions",
        list_sessions,
        "List sessions, newest first",
        {200: SessionList},
        params=(
            Param("status", "query", "comma-separated statuses"),
            Param("type", "query", "batch, interactive or inference"),
            Param("owner", "query", "user name (admins only)"),
            *PAGING,
        ),
    ),
    Route(
        "GET",
        "/v2/sessions/{id}",
        get_session,
        "Read one session",
        {200: SessionOut, 409: None},
        params=(SESSION_REF,),
    ),
    Route(
        "DELETE",
        "/v2/sessions/{id}",
        terminate_session,
        "Terminate a session (idempotent)",
        {202: SessionOut, 409: None},
        params=(SESSION_REF, Param("forced", "query", "skip the graceful stop", {"type": "boolean"})),
    ),
    Route(
        "GET",
        "/v2/sessions/{id}/attempts",
        session_attempts,
        "The session's retry chain, oldest first: each attempt's status, cause and timestamps",
        {200: AttemptList, 409: None},
        params=(SESSION_REF,),
    ),
    Route(
        "GET",
        "/v2/sessions/{id}/history",
        session_history,
        "Scheduling history, oldest first (the handler runs that moved it; `all=true`: every run)",
        {200: HistoryList, 409: None},
        params=(
            SESSION_REF,
            *PAGING,
            Param("all", "query", "also the runs that moved nothing (from = to)", {"type": "boolean"}),
        ),
    ),
    session_logs.ROUTE,
]
