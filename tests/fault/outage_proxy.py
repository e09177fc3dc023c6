"""A TCP forwarder the fault tests put between the daemons and PostgreSQL, Redis or etcd, so that a
service can be taken away from them without touching the machine's shared one.

`cut()` closes every live connection through it (the daemons see the peer reset) and stops
listening (new connections are refused), as a stopped service would; `restore()` listens on the
same port again. The forwarder runs its own event loop in a thread, so it keeps forwarding while
the test's loop is busy or blocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

T = TypeVar("T")
CHUNK = 65536


class OutageProxy:
    """Forwards 127.0.0.1:`port` to `target` (host, port) until `cut()`; `restore()` resumes."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = _free_port()
        self.cuts = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"outage-proxy-{self.port}")
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> OutageProxy:
        self._thread.start()
        self.restore()
        return self

    def cut(self) -> None:
        """Refuse new connections and reset every live one."""
        self.cuts += 1
        self._call(self._cut())

    def restore(self) -> None:
        """Accept connections again (on the same port)."""
        self._call(self._listen())

    def close(self) -> None:
        self._call(self._cut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(
                self._accept, "127.0.0.1", self.port, reuse_address=True
            )

    async def _cut(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            _abort(writer)
        self._writers.clear()
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _abort(writer)
            return
        if self._server is None:  # cut while connecting
            _abort(writer)
            _abort(up_writer)
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                _abort(w)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        _abort(writer)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close at once with a reset: what a service that went away looks like to its clients."""
    transport = writer.transport
    if not transport.is_closing():
        transport.abort()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def via(url: str, proxy: OutageProxy) -> str:
    """`url` (postgresql+asyncpg://…, redis://…) with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{proxy.address}" if userinfo else proxy.address
    return urlunsplit(parts._replace(netloc=netloc))


def target_of(url: str) -> tuple[str, int]:
    """(host, port) of a service URL or of an etcd `host:port`."""
    if "://" not in url:
        host, _, port = url.rpartition(":")
        return host or "127.0.0.1", int(port)
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 0
