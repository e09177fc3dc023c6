"""`GET /events/session`: one session's lifecycle as the server-sent events Backend.AI's client
reads (`session events`, `session watch`, `ComputeSession.listen_events()`).

The session is named by `sessionId` or `sessionName` (or `name`), among the caller's sessions
(`session_ref`). Sokovan's own events (`bus.user_events`, from the same hub as `/v2/events`) are
renamed to the client's: a kernel's `kernel.status` to `kernel_creating`, `kernel_started`,
`kernel_terminating`, `kernel_terminated` or `kernel_cancelled`; the session's `session.status`
to `session_started`, and at its end to `session_success` or `session_failure` (with the main
kernel's `exitCode`) or `session_cancelled`, then `session_terminated`. `scope` (a comma-separated
list of `session` and `kernel`, or `*` for both; the CLI sends `session,kernel`) picks which of the
two kinds are sent. Each event's data is a JSON object with
`sessionId`, `sessionName`, `ownerAccessKey`, `reason` and, for kernels, `kernelId`.

The stream starts from the session's current state, so a client that connects late still learns
where it is, and ends after the session's end with `event: server_close` (the client reconnects
forever otherwise). It counts against the caller's event-stream limits like `/v2/events`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from sokovan.bus.user_events import UserEvent
from sokovan.common.types import SessionStatus
from sokovan.manager.api.auth import principal_of
from sokovan.manager.api.compat.sessions import session_view
from sokovan.manager.api.deadline import deadline
from sokovan.manager.api.events import LIMITS_KEY, STREAMS_CLOSING_KEY, client_gone, event_stream
from sokovan.manager.api.openapi import Route
from sokovan.manager.api.problems import Problem
from sokovan.manager.api.session_ref import resolve
from sokovan.manager.repositories.tenancy import Principal

LIVENESS = 1.0  # seconds between checks that the client is still there
SCOPES = frozenset({"*", "session", "kernel"})
_KERNEL_NAMES = {
    "CREATING": "kernel_creating",
    "RUNNING": "kernel_started",
    "TERMINATING": "kernel_terminating",
    "TERMINATED": "kernel_terminated",
    "ERROR": "kernel_terminated",
    "CANCELLED": "kernel_cancelled",
}


def _frame(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _exit_code(view: dict[str, Any]) -> int | None:
    kernels = view.get("kernels") or []
    main = next((k for k in kernels if k.get("cluster_role") == "main"), kernels[0] if kernels else None)
    code = None if main is None else main.get("exit_code")
    return code if isinstance(code, int) else None


def session_events_of(view: dict[str, Any], base: dict[str, Any]) -> tuple[list[tuple[str, bytes]], bool]:
    """What the session's current status says to the client (event names and frames), and
    whether that is its end."""
    status = SessionStatus(view["status"])
    reason = (view.get("status_info") or {}).get("cause") or ""
    data = {**base, "reason": reason}
    terminated = ("session_terminated", _frame("session_terminated", data))
    if status == SessionStatus.RUNNING:
        return [("session_started", _frame("session_started", data))], False
    if status == SessionStatus.CANCELLED:
        return [("session_cancelled", _frame("session_cancelled", data)), terminated], True
    if status in SessionStatus.terminal():
        code = _exit_code(view)
        if view.get("result") == "SUCCESS":
            name, code = "session_success", 0 if code is None else code
        else:
            name, code = "session_failure", 1 if code is None else code
        return [(name, _frame(name, {**data, "exitCode": code})), terminated], True
    return [], False


def kernel_frame(event: UserEvent, base: dict[str, Any]) -> bytes | None:
    name = _KERNEL_NAMES.get(event.to_status or "")
    if name is None:
        return None
    reason = str(event.detail.get("cause") or event.detail.get("reason") or "")
    return _frame(name, {**base, "kernelId": event.kernel_id, "reason": reason})


async def _session_ref(request: web.Request, principal: Principal) -> uuid.UUID:
    ref = request.query.get("sessionId") or request.query.get("sessionName") or request.query.get("name")
    if not ref:
        raise Problem(400, "Bad query parameter", "sessionId or sessionName names the session to watch")
    found = await resolve(request, ref, principal)
    if found.session_id is None:
        raise Problem(404, "Not found", f"no session {ref!r}", slug="not-found")
    return found.session_id


@deadline(None)  # until the session ends or the client goes
async def session_events(request: web.Request) -> web.StreamResponse:
    principal = principal_of(request)
    scope = {part.strip() for part in request.query.get("scope", "*").split(",") if part.strip()}
    if not scope or not scope <= SCOPES:
        raise Problem(400, "Bad query parameter", "scope is a comma-separated list of session, kernel, or *")
    session_id = await _session_ref(request, principal)
    view = await session_view(request, session_id, principal)

    def gone() -> bool:
        return client_gone(request)

    wanted = str(session_id)
    async with (
        request.app[LIMITS_KEY].hold(principal.access_key, lambda: not gone()),
        event_stream(request, lambda event: event.session_id == wanted) as (listener, response),
    ):
        base = {"sessionId": wanted, "sessionName": view["name"], "ownerAccessKey": view["access_key"]}
        view = await session_view(request, session_id, principal)  # what happened before the subscription
        first, ended = session_events_of(view, base)
        with contextlib.suppress(ConnectionError):  # the client went away mid-write
            await _pump(request, response, listener.queue, base, scope, first, ended, gone)
        return response


async def _pump(
    request: web.Request,
    response: web.StreamResponse,
    queue: asyncio.Queue[UserEvent | None],
    base: dict[str, Any],
    scope: set[str],
    first: list[tuple[str, bytes]],
    ended: bool,
    gone: Callable[[], bool],
) -> None:
    principal = principal_of(request)
    closing = request.app[STREAMS_CLOSING_KEY]
    sessions, kernels = bool(scope & {"*", "session"}), bool(scope & {"*", "kernel"})
    sent: set[str] = set()  # a session event goes out once, however many moves re-read it

    async def send(events: list[tuple[str, bytes]]) -> None:
        fresh = [frame for name, frame in events if name not in sent]
        sent.update(name for name, _ in events)
        if sessions and fresh:
            await response.write(b"".join(fresh))

    await send(first)
    while not ended and not closing.is_set() and not gone():
        try:
            event = await asyncio.wait_for(queue.get(), LIVENESS)
        except TimeoutError:
            continue
        if event is None:  # the hub ended this stream (a slow client, Redis lost)
            break
        if event.name == "kernel.status" and kernels:
            frame = kernel_frame(event, base)
            if frame is not None:
                await response.write(frame)
        elif event.name == "session.status":
            # the view, not the event, holds the result and the exit code of an end
            view = await session_view(request, uuid.UUID(base["sessionId"]), principal)
            events, ended = session_events_of(view, base)
            await send(events)
    if not gone():  # a client that went away is owed nothing more
        await response.write(_frame("server_close", {}))


ROUTES = [
    Route(
        "GET",
        "/events/session",
        session_events,
        "Backend.AI client: one session's lifecycle as server-sent events",
        {200: None},
    ),
]
