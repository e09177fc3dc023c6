"""A request never waits on a silent peer: it is a 503 within a few seconds, never a hang.

PostgreSQL, Redis or etcd behind a drop rule (packets lost, not refused) leave a call waiting for
TCP to give up, about 15 minutes. The clock alone cannot tell that from a busy cluster (a DELETE
waiting on row locks while thousands of sessions are placed is slow, not stuck), so the manager
probes its peers (`manager.peer_watch`; slowly while no request waits, fast from `WANTED_AFTER`
seconds into a request): from `FIRST_LOOK` seconds into a request, and every `LOOK_EVERY` after, a
request is cancelled as soon as a peer has not answered its probes for
`SILENT_AFTER` (2 s), and otherwise goes on, up to `HARD_LIMIT`. `unavailable_middleware`
(outside this one) answers the cancelled request's `TimeoutError` with 503 problem+json and
`Retry-After`, as for a refused connection: within about 5 s of the request, or of the silence
when the request started before it. A create cancelled so may still have been written: the client
retries it with the same `creation_id` (idempotent), as after any 503.

Where nothing probes the peers (an API built without a watch) the deadline is the clock's:
`REQUEST_DEADLINE` (4 s). A handler that waits on something slower by design says so with
`@deadline(seconds)` (the logs endpoint, which waits on agents up to the RPC timeout: its own limit
in place of `HARD_LIMIT`), or `@deadline(None)` (the event stream, which runs until its client
goes; it has its own timeouts before its first byte).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from aiohttp import web
from aiohttp.typedefs import Handler

from sokovan.manager.api.auth import CTX_KEY

REQUEST_DEADLINE = 4.0  # seconds, where nothing probes the peers
WANTED_AFTER = 0.5  # seconds into a request before the peers are probed fast
FIRST_LOOK = 2.5  # seconds into a request before the peers are looked at
LOOK_EVERY = 0.25
HARD_LIMIT = 60.0  # even with every peer answering, no request runs longer
_ATTRIBUTE = "_sokovan_deadline"
_UNMARKED = object()

H = TypeVar("H", bound=Callable[..., object])


def deadline(seconds: float | None) -> Callable[[H], H]:
    """Give a handler a deadline other than the default (None: none)."""

    def mark(handler: H) -> H:
        setattr(handler, _ATTRIBUTE, seconds)
        return handler

    return mark


@web.middleware
async def deadline_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    mark: object = getattr(request.match_info.handler, _ATTRIBUTE, _UNMARKED)
    if mark is None:
        return await handler(request)
    own = float(mark) if isinstance(mark, int | float) else None  # a handler's own limit
    ctx = request.app.get(CTX_KEY)
    peers = ctx.peers if ctx is not None else None
    if peers is None:
        async with asyncio.timeout(own or REQUEST_DEADLINE):
            return await handler(request)
    limit = own or HARD_LIMIT
    loop = asyncio.get_running_loop()
    began = loop.time()
    async with asyncio.timeout(None) as scope:
        timer: asyncio.TimerHandle | None = None

        def look() -> None:
            nonlocal timer
            now = loop.time()
            peers.want()
            if peers.silent() or now - began >= limit:
                scope.reschedule(now)  # expires at once: the handler is cancelled
            else:
                timer = loop.call_later(LOOK_EVERY, look)

        def wake() -> None:
            nonlocal timer
            peers.want()
            timer = loop.call_later(first - WANTED_AFTER, look)

        first = min(FIRST_LOOK, limit)
        timer = loop.call_later(first, look) if first <= WANTED_AFTER else loop.call_later(WANTED_AFTER, wake)
        try:
            return await handler(request)
        finally:
            timer.cancel()
