"""Every request is answered within a deadline: a silent peer is a 503, never a hang.

PostgreSQL, Redis or etcd behind a drop rule (packets lost, not refused) leave a call waiting for
TCP to give up, about 15 minutes. The API does not wait that long: a request still running after
its deadline is cancelled, and `unavailable_middleware` (outside this one) answers the
`TimeoutError` with 503 problem+json and `Retry-After`, as for a refused connection. A create
cancelled so may still have been written: the client retries it with the same `creation_id`
(idempotent), as after any 503.

`REQUEST_DEADLINE` (4 s) keeps the contract's 5 s with room for the answer itself. A handler that
waits on something slower by design says so with `@deadline(seconds)` (the logs endpoint, which waits
on agents up to the RPC timeout) or `@deadline(None)` (the event stream, which runs until its client
goes; it has its own timeouts before its first byte).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from aiohttp import web
from aiohttp.typedefs import Handler

REQUEST_DEADLINE = 4.0  # seconds
_ATTRIBUTE = "_sokovan_deadline"

H = TypeVar("H", bound=Callable[..., object])


def deadline(seconds: float | None) -> Callable[[H], H]:
    """Give a handler a deadline other than REQUEST_DEADLINE (None: none)."""

    def mark(handler: H) -> H:
        setattr(handler, _ATTRIBUTE, seconds)
        return handler

    return mark


def deadline_of(handler: object) -> float | None:
    value = getattr(handler, _ATTRIBUTE, REQUEST_DEADLINE)
    return value if value is None else float(value)


@web.middleware
async def deadline_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    seconds = deadline_of(request.match_info.handler)
    if seconds is None:
        return await handler(request)
    async with asyncio.timeout(seconds):
        return await handler(request)
