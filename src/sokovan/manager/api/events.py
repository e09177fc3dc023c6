"""`GET /v2/events`: the user events of `sokovan.bus.user_events` as server-sent events.

One Redis subscription per manager (`UserEventHub`) feeds every open stream; each stream forwards
the events its caller may see (an admin all, a user those of its own sessions and deployments),
optionally only those of one session (`?session_id=`: its id, name or id prefix, as
`session_ref` reads them) or one deployment and its routes
(`?deployment_id=`). The subscription is confirmed before the response headers go out, so a client
that has the headers misses nothing published afterwards. A comment line every
`KEEPALIVE_INTERVAL` seconds keeps proxies from closing an idle stream; a client that goes away, or
the server shutting down, ends its stream. A client too slow to keep up, or a lost subscription
(Redis went away), ends the stream too (with a comment saying why): the client reconnects and
reads the current state from the REST API.

Limits (`stream_limits`): `STREAMS_PER_KEYPAIR` open streams per keypair and
`Settings.max_event_streams` (SOKOVAN_MAX_EVENT_STREAMS, 2,000) per manager; past either, 429
problem+json. They hold for the whole manager, all the worker processes of `--workers N` together
(counted in Redis); each worker keeps its own subscription to the events. A stream that ends frees
its place at once, and so does one whose client has gone (its connection was lost), even before its
handler notices.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from sokovan.bus.user_event_hub import HubUnavailable, Listener, UserEventHub
from sokovan.bus.user_events import UserEvent
from sokovan.manager.api.auth import CTX_KEY, principal_of
from sokovan.manager.api.deadline import deadline
from sokovan.manager.api.openapi import Param, Route
from sokovan.manager.api.problems import Problem
from sokovan.manager.api.session_ref import SESSION_REF_QUERY, query_session_id
from sokovan.manager.api.stream_limits import STREAMS_PER_KEYPAIR, StreamLimits, unavailable
from sokovan.manager.repositories.tenancy import Principal

log = structlog.get_logger(__name__)

KEEPALIVE_INTERVAL = 15.0  # seconds between `: keep-alive` comments (tests shorten it)
# How often an idle stream checks that its client is still there (aiohttp does not cancel a
# handler whose client went away) and that the server is not shutting down.
LIVENESS_INTERVAL = 1.0
WRITE_BATCH = 256  # events at most in one write to a stream

# Set by the app's on_shutdown hook: every open stream ends within LIVENESS_INTERVAL.
STREAMS_CLOSING_KEY = web.AppKey("event_streams_closing", asyncio.Event)
# The handler tasks of the open streams (for the shutdown hook and for tests).
STREAMS_KEY = web.AppKey("event_streams", weakref.WeakSet[asyncio.Task[Any]])
HUB_KEY = web.AppKey("event_hub", UserEventHub)
LIMITS_KEY = web.AppKey("event_stream_limits", StreamLimits)


def setup(app: web.Application) -> None:
    ctx = app[CTX_KEY]
    app[STREAMS_CLOSING_KEY] = asyncio.Event()
    app[STREAMS_KEY] = weakref.WeakSet()
    app[HUB_KEY] = UserEventHub(ctx.redis, ctx.settings.etcd_prefix)
    prefix, total = ctx.settings.etcd_prefix, ctx.settings.max_event_streams
    app[LIMITS_KEY] = StreamLimits(ctx.redis, prefix, ctx.manager_id, STREAMS_PER_KEYPAIR, total)
    app.cleanup_ctx.append(_run_limits)
    app.on_shutdown.append(_close_streams)
    app.on_cleanup.append(_close_hub)


async def _run_limits(app: web.Application) -> AsyncIterator[None]:
    """The worker's sweeps and lease refreshes (`StreamLimits.run`), while the app runs."""
    stop = asyncio.Event()
    task = asyncio.create_task(app[LIMITS_KEY].run(stop), name="event-stream-limits")
    yield
    stop.set()  # ends it within a sweep's interval even if the cancel below is lost
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _close_streams(app: web.Application) -> None:
    app[STREAMS_CLOSING_KEY].set()
    tasks = [t for t in app[STREAMS_KEY] if not t.done()]
    if tasks:
        await asyncio.wait(tasks, timeout=LIVENESS_INTERVAL * 3)


async def _close_hub(app: web.Application) -> None:
    await app[HUB_KEY].close()


@dataclass(frozen=True)
class EventFilter:
    """`?session_id=` / `?deployment_id=`: only the events naming that session / deployment."""

    session_id: str | None = None
    deployment_id: str | None = None


def _uuid_query(request: web.Request, name: str) -> str | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return str(uuid.UUID(raw))
    except ValueError as exc:
        raise Problem(400, "Bad query parameter", f"{name} must be a UUID, got {raw!r}") from exc


async def _event_filter(request: web.Request, principal: Principal) -> EventFilter:
    deployment_id = _uuid_query(request, "deployment_id")
    return EventFilter(await query_session_id(request, principal), deployment_id)


def _same_id(value: str | None, wanted: str | None) -> bool:
    if wanted is None:
        return True
    if value is None:
        return False
    try:
        return str(uuid.UUID(value)) == wanted
    except ValueError:
        return False


def visible(event: UserEvent, principal: Principal, flt: EventFilter) -> bool:
    """An admin sees every event, a user those it owns (its sessions, its deployments and their
    routes); then the filters apply."""
    if not principal.is_admin and event.owner != str(principal.user_id):
        return False
    return _same_id(event.session_id, flt.session_id) and _same_id(event.deployment_id, flt.deployment_id)


def client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


@deadline(None)  # until the client goes; hub.open has its own timeout
async def stream_events(request: web.Request) -> web.StreamResponse:
    principal = principal_of(request)
    flt = await _event_filter(request, principal)
    async with request.app[LIMITS_KEY].hold(principal.access_key, lambda: not client_gone(request)):
        return await _stream(request, principal, flt)


async def _stream(request: web.Request, principal: Principal, flt: EventFilter) -> web.StreamResponse:
    closing = request.app[STREAMS_CLOSING_KEY]
    task = asyncio.current_task()
    if task is not None:
        request.app[STREAMS_KEY].add(task)
    async with event_stream(request, lambda event: visible(event, principal, flt)) as (listener, response):
        await response.write(b": connected\n\n")  # sends the headers now
        await _pump(request, response, listener, principal, flt, closing)
        return response


@contextlib.asynccontextmanager
async def event_stream(
    request: web.Request, accept: Callable[[UserEvent], bool]
) -> AsyncIterator[tuple[Listener, web.StreamResponse]]:
    """A listener of the hub for the events `accept` takes (confirmed subscribed: 503 when the hub
    cannot subscribe) and the prepared `text/event-stream` response to write them to; the
    listener is closed after."""
    hub = request.app[HUB_KEY]
    try:
        listener = await hub.open(accept)
    except HubUnavailable as exc:
        raise unavailable("could not subscribe to the event channel; retry later") from exc
    try:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # nginx: do not buffer the stream
            }
        )
        await response.prepare(request)
        yield listener, response
    finally:
        await asyncio.shield(hub.close_listener(listener))


async def _pump(
    request: web.Request,
    response: web.StreamResponse,
    listener: Listener,
    principal: Principal,
    flt: EventFilter,
    closing: asyncio.Event,
) -> None:
    next_keepalive = time.monotonic() + KEEPALIVE_INTERVAL
    try:
        while not closing.is_set() and not client_gone(request):
            wait = max(0.0, min(LIVENESS_INTERVAL, next_keepalive - time.monotonic()))
            try:
                event = await asyncio.wait_for(listener.queue.get(), wait)
            except TimeoutError:
                pass
            else:
                # the hub queued only what `visible` accepts; what queued meanwhile goes in the
                # same write (each event's frame is made once, for every stream that sends it)
                ended = event is None  # None: the hub ended this stream
                frames = [] if event is None else [event.sse_frame()]
                while not ended and len(frames) < WRITE_BATCH and not listener.queue.empty():
                    more = listener.queue.get_nowait()
                    if more is None:
                        ended = True
                    else:
                        frames.append(more.sse_frame())
                if frames:
                    await response.write(b"".join(frames))
                if ended:
                    await response.write(f": stream ended ({listener.ended})\n\n".encode())
                    return
            if time.monotonic() >= next_keepalive:
                await response.write(b": keep-alive\n\n")
                next_keepalive = time.monotonic() + KEEPALIVE_INTERVAL
    except ConnectionError as exc:
        # The client went away between the liveness check and a write.
        log.debug("events.client_gone", error=repr(exc))


ROUTES = [
    Route(
        "GET",
        "/v2/events",
        stream_events,
        "Server-sent events: session, kernel, agent, retry, deployment and route transitions and "
        "preemptions (`session.preempted`: session_id, preempted_by, agent_id) the "
        "caller may see (its own sessions and deployments; an admin all). Each message has "
        "`event: <name>` and `data: <UserEvent JSON>`; a `: keep-alive` comment comes every 15 s",
        {200: UserEvent, 409: None},
        params=(
            SESSION_REF_QUERY,
            Param(
                "deployment_id",
                "query",
                "only the events of this deployment and its routes",
                {"type": "string", "format": "uuid"},
            ),
        ),
        media_type="text/event-stream",
    ),
]
