"""The session endpoints of Backend.AI's client: `POST /session`, `GET /session/{x}`,
`GET /session/{x}/logs` and `DELETE /session/{x}`, where `{x}` is a session's id or name (or an id
prefix), looked up among the caller's sessions only (`session_ref`).

They go through the same controller, reads and problems as `/v2/sessions`: a create is a
`SessionCreateRequest` built from the client's body, so every check of `/v2` (quotas, images,
scaling groups, bounds) holds here too. What the client's body asks that Sokovan has no use for
(vfolder mounts, bootstrap scripts, callbacks, `batch_timeout`, architecture) is ignored; a mount
is refused, as a session that silently lacks its data would be worse.

A name the caller already has a live session of is reused (`reuseIfExists`, the client's default:
the answer is that session, `created: false`), or refused with 409 when the client asks not to.
A create waits, as Backend.AI's does unless `enqueueOnly`, until the session runs or ends, at most
`maxWaitSeconds` (`TIMEOUT` past it) or `CREATE_WAIT` when that is 0, and answers with the status it
reached (`PENDING` when it is still queued).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from sokovan.common.types import SessionStatus
from sokovan.manager.api.auth import CTX_KEY, principal_of
from sokovan.manager.api.common import CONTROLLER_KEY
from sokovan.manager.api.compat.mapping import bai_result, bai_status
from sokovan.manager.api.deadline import deadline
from sokovan.manager.api.json_input import InputError, load_json
from sokovan.manager.api.openapi import Route
from sokovan.manager.api.problems import Problem, validation_problem
from sokovan.manager.api.session_logs import session_logs
from sokovan.manager.api.session_ref import path_session_id
from sokovan.manager.controller.session_spec import SessionCreateRequest
from sokovan.manager.repositories import session_lookup, sessions_read
from sokovan.manager.repositories.tenancy import Principal

CREATE_WAIT = 30.0  # seconds a create waits for its session to start when the client sets no limit
POLL = 0.1
STARTED = frozenset({SessionStatus.RUNNING, *SessionStatus.terminal()})


def _spec(body: dict[str, Any]) -> SessionCreateRequest:
    """The client's create body as Sokovan's request; 422 when it does not make one."""
    config = body.get("config") or {}
    if not isinstance(config, dict):
        raise Problem(422, "Validation failed", "config must be an object", slug="validation-failed")
    if config.get("mounts") or config.get("mount_ids") or config.get("mount_map"):
        raise Problem(
            422, "Not supported", "Sokovan has no vfolders: mounts are not supported", slug="not-supported"
        )
    fields: dict[str, Any] = {
        "name": body.get("name") or body.get("clientSessionToken"),
        "image": body.get("image") or body.get("lang"),
        "type": body.get("type") or "interactive",
        "command": body.get("startupCommand") or None,
        "resources": config.get("resources") or None,
        "environ": config.get("environ") or {},
        "cluster_size": body.get("clusterSize") or config.get("clusterSize") or 1,
        "cluster_mode": body.get("clusterMode") or "single-node",
        "scaling_group": config.get("scalingGroup") or config.get("scaling_group") or "default",
        "depends_on": body.get("dependencies") or [],
    }
    if body.get("priority") is not None:
        fields["priority"] = body["priority"]
    try:
        return SessionCreateRequest.model_validate(fields)
    except ValidationError as exc:
        raise validation_problem(exc) from exc


async def _body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object; 400 when it is not one."""
    raw = await request.read()
    try:
        data = load_json(raw) if raw.strip() else None
    except InputError as exc:
        raise Problem(400, "Malformed JSON", str(exc)) from exc
    if not isinstance(data, dict):
        raise Problem(400, "Malformed JSON", "the request body must be a JSON object")
    return data


async def session_view(request: web.Request, session_id: uuid.UUID, principal: Principal) -> dict[str, Any]:
    """The session as `GET /v2/sessions/{id}` shows it to `principal`; 404 when it may not see it."""
    async with request.app[CTX_KEY].engine.connect() as conn:
        view = await sessions_read.get_session(conn, session_id, principal)
    if view is None:
        raise Problem(404, "Not found", f"no session {session_id}", slug="not-found")
    return view


async def _live_named(request: web.Request, name: str, principal: Principal) -> uuid.UUID | None:
    """The caller's session of that name that has not ended, if any (what `reuseIfExists` reuses)."""
    async with request.app[CTX_KEY].engine.connect() as conn:
        found = await session_lookup.resolve(conn, name, principal)
        if found.session_id is None or found.by != "name":
            return None
        view = await sessions_read.get_session(conn, found.session_id, principal)
    if view is None or SessionStatus(view["status"]) in SessionStatus.terminal():
        return None
    return found.session_id


async def _wait_started(
    request: web.Request, session_id: uuid.UUID, principal: Principal, limit: float
) -> str:
    """The status the session reached within `limit` seconds: RUNNING or an end, else TIMEOUT
    (when the client set the limit) or its current status. A batch session that already ran to
    its end (it has a result) is answered RUNNING, as Backend.AI answers when it starts: the client
    reads TERMINATED here as a broken image."""
    loop = asyncio.get_running_loop()
    until = loop.time() + (limit or CREATE_WAIT)
    while True:
        view = await session_view(request, session_id, principal)
        status = SessionStatus(view["status"])
        if status == SessionStatus.TERMINATED and view.get("result") is not None:
            return bai_status(SessionStatus.RUNNING)
        if status in STARTED:
            return bai_status(status)
        if loop.time() >= until:
            return "TIMEOUT" if limit else bai_status(status)
        await asyncio.sleep(POLL)


@deadline(CREATE_WAIT + 10)
async def create_session(request: web.Request) -> web.Response:
    principal = principal_of(request)
    body = await _body(request)
    spec = _spec(body)
    reuse = body.get("reuseIfExists", True) is not False
    existing = await _live_named(request, spec.name, principal) if spec.name else None
    if existing is not None and not reuse:
        raise Problem(
            409, "Session exists", f"a session named {spec.name!r} is already live ({existing})",
            slug="session-exists",
        )  # fmt: skip
    if existing is not None:
        session_id, created = existing, False
    else:
        outcome = await request.app[CONTROLLER_KEY].create_session(principal, spec)
        session_id, created = outcome.session_id, outcome.created
    view = await session_view(request, session_id, principal)
    status = bai_status(view["status"])
    if not body.get("enqueueOnly") and created:
        wait = body.get("maxWaitSeconds") or 0
        limit = float(wait) if isinstance(wait, int | float) and not isinstance(wait, bool) else 0.0
        status = await _wait_started(request, session_id, principal, limit)
    answer = {
        "sessionId": str(session_id),
        "sessionName": view["name"],
        "status": status,
        "created": created,
        "servicePorts": [],
    }
    return web.json_response(answer, status=201 if created else 200)


def _info(view: dict[str, Any]) -> dict[str, Any]:
    """A session as the client's `get_info()` returns it (Backend.AI's names)."""
    return {
        "sessionId": str(view["id"]),
        "sessionName": view["name"],
        "type": str(view["type"]).upper(),
        "image": view["image"],
        "lang": view["image"],
        "status": bai_status(view["status"]),
        "result": bai_result(view.get("result")),
        "statusInfo": (view.get("status_info") or {}).get("cause"),
        "statusData": view.get("status_info") or {},
        "requestedSlots": view.get("resources") or {},
        "occupyingSlots": view.get("resources") or {},
        "environ": view.get("environ") or {},
        "clusterSize": view.get("cluster_size", 1),
        "clusterMode": view.get("cluster_mode"),
        "scalingGroup": view.get("scaling_group"),
        "creationTime": view.get("created_at"),
        "terminationTime": view.get("terminated_at"),
        "accessKey": view.get("access_key"),
        "kernels": [
            {"id": str(k.get("id")), "status": k.get("status"), "agent": k.get("agent_id")}
            for k in view.get("kernels") or []
        ],
    }


async def get_info(request: web.Request) -> web.Response:
    principal = principal_of(request)
    session_id = await path_session_id(request, principal)
    return web.json_response(_info(await session_view(request, session_id, principal)), dumps=_dumps)


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str)


async def get_logs(request: web.Request) -> web.Response:
    """The kernels' output as one text, main kernel first: stdout, then stderr."""
    answer = await session_logs(request)
    items = json.loads(answer.text or "{}").get("items", [])
    text = "".join(str(i.get("stdout") or "") + str(i.get("stderr") or "") for i in items)
    return web.json_response({"result": {"logs": text}})


async def destroy(request: web.Request) -> web.Response:
    principal = principal_of(request)
    session_id = await path_session_id(request, principal)
    forced = request.query.get("forced", "").lower() in {"1", "true", "yes"}
    await request.app[CONTROLLER_KEY].terminate_session(principal, session_id, forced)
    return web.json_response({"stats": {}})


ROUTES = [
    Route("POST", "/session", create_session, "Backend.AI client: create a session", {201: None}),
    Route("GET", "/session/{id}", get_info, "Backend.AI client: a session's information", {200: None}),
    Route("GET", "/session/{id}/logs", get_logs, "Backend.AI client: a session's logs", {200: None}),
    Route("DELETE", "/session/{id}", destroy, "Backend.AI client: end a session", {200: None}),
]
