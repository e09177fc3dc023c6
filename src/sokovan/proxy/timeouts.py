"""Cutting off slow clients (CONTRACT section 12): request headers and request bodies.

aiohttp's server has no timeout for reading a request's headers (its keep-alive timer only closes a
connection that sends nothing at all, after an hour by default), so a client sending a byte now and
then (slowloris) could hold a connection forever. `HeaderTimeoutHandler` is aiohttp's
`RequestHandler` with one timer more: armed when the connection is made, and again when the first
bytes of a next request arrive on a kept-alive connection; disarmed as soon as a request's headers
are parsed. When it fires the connection is closed. `GuardedRunner` is `web.AppRunner` serving
with it. It relies on two attributes of aiohttp's `RequestHandler` (`_request_count`, counting the
messages parsed, and `_waiter`, set while it waits for the next request).

A request body with no byte for `body_timeout` seconds is cut off by `body_chunks`, the iterator
that streams it to the replica: the client's connection is closed, which (handler cancellation)
cancels its handler and with it the replica's connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import structlog
from aiohttp import StreamReader, web
from aiohttp.web_protocol import RequestHandler

log = structlog.get_logger(__name__)


class HeaderTimeoutHandler(RequestHandler):
    def __init__(self, manager: web.Server, *, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout = header_timeout
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        parsed = self._request_count
        super().data_received(data)
        if self._request_count != parsed:
            self._disarm()
        elif self._header_timer is None and self._waiter is not None:
            self._arm()  # the first bytes of a next request on a kept-alive connection

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self._header_timer = loop.call_later(self._header_timeout, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        log.info("proxy.header_timeout", peer=str(self.peername), timeout=self._header_timeout)
        self.force_close()


class HeaderTimeoutServer(web.Server):
    def __init__(self, *args: Any, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout = header_timeout

    def __call__(self) -> RequestHandler:
        return HeaderTimeoutHandler(self, loop=self._loop, header_timeout=self.header_timeout, **self._kwargs)


class GuardedRunner(web.AppRunner):
    """`web.AppRunner` whose connections get `header_timeout` seconds to send a request's headers."""

    def __init__(self, app: web.Application, *, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._header_timeout = header_timeout

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()
        return HeaderTimeoutServer(
            made.request_handler,
            request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation,
            header_timeout=self._header_timeout,
            **made._kwargs,
        )


# Set on a request whose client `body_chunks` cut off.
BODY_TIMED_OUT = web.RequestKey("sokovan.body_timed_out", bool)


class BodyTimeout(Exception):
    """The client sent no byte of its request body for too long (its connection is closed)."""


async def body_chunks(request: web.Request, idle: float) -> AsyncIterator[bytes]:
    """The request's body as it arrives; past `idle` seconds without a byte, the client is cut off."""
    content: StreamReader = request.content
    while True:
        try:
            async with asyncio.timeout(idle):
                chunk = await content.readany()
        except TimeoutError:
            log.info("proxy.body_timeout", peer=request.remote, timeout=idle)
            request[BODY_TIMED_OUT] = True
            if request.transport is not None:
                request.transport.close()
            raise BodyTimeout(f"no byte of the request body for {idle} s") from None
        if not chunk:
            return
        yield chunk
