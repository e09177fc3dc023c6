"""`GET /v2/events`: the user events of `sokovan.bus.user_events` as server-sent events.

Each connection subscribes to the Redis channel `<prefix>:user-events` for its lifetime and
forwards the events its caller may see (an admin all, a user those of its own sessions and
deployments), optionally only those of one session (`?session_id=`) or one deployment and its
routes (`?deployment_id=`). The subscription is confirmed by Redis
before the response headers go out, so a client that has the headers misses nothing published
afterwards. A comment line every `KEEPALIVE_INTERVAL` seconds keeps proxies from closing an idle
stream; a client that goes away, or the server shutting down, ends the subscription.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web
from pydantic import ValidationError
from redis.asyncio.client import PubSub

from sokovan.bus.user_events import UserEvent, user_events_channel
from sokovan.manager.api.auth import CTX_KEY, principal_of
from sokovan.manager.api.openapi import Param, Route
from sokovan.manager.api.problems import Problem
from sokovan.manager.repositories.tenancy import Principal

log = structlog.get_logger(__name__)

KEEPALIVE_INTERVAL = 15.0  # seconds between `: keep-alive` comments (tests shorten it)
# How often an idle stream checks that its client is still there (aiohttp does not cancel a
# handler whose client went away) and that the server is not shutting down.
LIVENESS_INTERVAL = 1.0
SUBSCRIBE_TIMEOUT = 5.0

# Set by the app's on_shutdown hook: every open stream ends within LIVENESS_INTERVAL.
STREAMS_CLOSING_KEY = web.AppKey("event_streams_closing", asyncio.Event)
# The handler tasks of the open streams (for the shutdown hook and for tests).
STREAMS_KEY = web.AppKey("event_streams", weakref.WeakSet[asyncio.Task[Any]])


def setup(app: web.Application) -> None:
    app[STREAMS_CLOSING_KEY] = asyncio.Event()
    app[STREAMS_KEY] = weakref.WeakSet()
    app.on_shutdown.append(_close_streams)


async def _close_streams(app: web.Application) -> None:
    app[STREAMS_CLOSING_KEY].set()
    tasks = [t for t in app[STREAMS_KEY] if not t.done()]
    if tasks:
        await asyncio.wait(tasks, timeout=LIVENESS_INTERVAL * 3)


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


def _event_filter(request: web.Request) -> EventFilter:
    return EventFilter(_uuid_query(request, "session_id"), _uuid_query(request, "deployment_id"))


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


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def stream_events(request: web.Request) -> web.StreamResponse:
    principal = principal_of(request)
    flt = _event_filter(request)
    ctx = request.app[CTX_KEY]
    closing = request.app[STREAMS_CLOSING_KEY]
    task = asyncio.current_task()
    if task is not None:
        request.app[STREAMS_KEY].add(task)
    channel = user_events_channel(ctx.settings.etcd_prefix)
    pubsub = ctx.redis.pubsub(ignore_subscribe_messages=False)
    try:
        await pubsub.subscribe(channel)
        await _confirmed(pubsub)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # nginx: do not buffer the stream
            }
        )
        await response.prepare(request)
        await response.write(b": connected\n\n")  # sends the headers now
        await _pump(request, response, pubsub, principal, flt, closing)
        return response
    finally:
        await _release(pubsub, channel)


async def _confirmed(pubsub: PubSub) -> None:
    """Wait for Redis to confirm the subscription; messages published later all reach us."""
    deadline = time.monotonic() + SUBSCRIBE_TIMEOUT
    while time.monotonic() < deadline:
        message = await pubsub.get_message(timeout=deadline - time.monotonic())
        if message is not None and message.get("type") == "subscribe":
            return
    raise Problem(503, "Service Unavailable", "could not subscribe to the event channel")


async def _pump(
    request: web.Request,
    response: web.StreamResponse,
    pubsub: PubSub,
    principal: Principal,
    flt: EventFilter,
    closing: asyncio.Event,
) -> None:
    next_keepalive = time.monotonic() + KEEPALIVE_INTERVAL
    try:
        while not closing.is_set() and not _client_gone(request):
            wait = max(0.0, min(LIVENESS_INTERVAL, next_keepalive - time.monotonic()))
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=wait)
            if message is not None and message.get("type") == "message":
                event = _parse(message.get("data"))
                if event is not None and visible(event, principal, flt):
                    await response.write(f"event: {event.name}\ndata: {event.wire()}\n\n".encode())
            if time.monotonic() >= next_keepalive:
                await response.write(b": keep-alive\n\n")
                next_keepalive = time.monotonic() + KEEPALIVE_INTERVAL
    except ConnectionError as exc:
        # The client went away between the liveness check and a write.
        log.debug("events.client_gone", error=repr(exc))


def _parse(data: Any) -> UserEvent | None:
    try:
        return UserEvent.model_validate_json(data)
    except (ValidationError, TypeError, ValueError):
        log.warning("events.malformed_user_event", data=repr(data)[:200])
        return None


async def _release(pubsub: PubSub, channel: str) -> None:
    try:
        await asyncio.shield(_unsubscribe(pubsub, channel))
    except Exception as exc:  # a Redis that went away: the connection is dropped all the same
        log.debug("events.unsubscribe_failed", error=repr(exc))


async def _unsubscribe(pubsub: PubSub, channel: str) -> None:
    try:
        await pubsub.unsubscribe(channel)
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


ROUTES = [
    Route(
        "GET",
        "/v2/events",
        stream_events,
        "Server-sent events: session, kernel, agent, retry, deployment and route transitions the "
        "caller may see (its own sessions and deployments; an admin all). Each message has "
        "`event: <name>` and `data: <UserEvent JSON>`; a `: keep-alive` comment comes every 15 s",
        {200: UserEvent},
        params=(
            Param(
                "session_id",
                "query",
                "only the events of this session",
                {"type": "string", "format": "uuid"},
            ),
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
