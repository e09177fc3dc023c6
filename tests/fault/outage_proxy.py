"""A TCP forwarder the fault tests put between the daemons and PostgreSQL, Redis or etcd, so that a
service can be taken away from them without touching the machine's shared one.

`cut()` closes every live connection through it (the daemons see the peer reset) and stops
listening (new connections are refused), as a stopped service would; `restore()` listens on the
same port again. `strand()` leaves the service up but its live connections silent for good.
`blackhole()` is the other kind of outage, a drop rule rather than a refusal: every
connection, live or new, stays open but nothing passes either way (what is sent is held, as TCP holds
what it cannot deliver), until `restore()` lets it all through again, in order. The forwarder runs
its own event loop in a thread, so it keeps forwarding while the test's loop is busy or blocked.
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
    """Forwards `host`:`port` to `target` (host, port) until `cut()`; `restore()` resumes."""

    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1") -> None:
        self.target = target
        self.host = host
        self.port = _free_port(host)
        self.cuts = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"outage-proxy-{self.port}")
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._passing: asyncio.Event | None = None  # made on the proxy's own loop

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> OutageProxy:
        self._thread.start()
        self.restore()
        return self

    def cut(self) -> None:
        """Refuse new connections and reset every live one."""
        self.cuts += 1
        self._call(self._cut())

    def blackhole(self) -> None:
        """Nothing passes either way, on live connections and new ones, and nothing is refused."""
        self.cuts += 1
        self._call(self._hold())

    def strand(self) -> None:
        """The live connections go silent for good (held until `close()`); new ones pass: a
        firewall or NAT that lost their state, or a service moved to another host."""
        self.cuts += 1
        self._call(self._strand())

    def restore(self) -> None:
        """Accept connections again (on the same port) and let through what was held (not what
        `strand()` stranded)."""
        self._call(self._listen())

    async def _cancel_the_rest(self) -> None:
        """The connections' own tasks, so that none is left pending when the loop closes."""
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    async def _hold(self) -> None:
        self._gate().clear()

    async def _strand(self) -> None:
        self._gate().clear()
        self._passing = None  # the next connection makes a new, open gate

    def _gate(self) -> asyncio.Event:
        if self._passing is None:
            self._passing = asyncio.Event()
            self._passing.set()
        return self._passing

    def close(self) -> None:
        self._call(self._cut())
        self._call(self._cancel_the_rest())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _listen(self) -> None:
        self._gate().set()
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True)

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
        gate = self._gate()
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
            await asyncio.gather(_pipe(reader, up_writer, gate), _pipe(up_reader, writer, gate))
        except asyncio.CancelledError:
            pass  # closed while held (`close()`): the connection simply ends
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                _abort(w)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: asyncio.Event) -> None:
    try:
        while data := await reader.read(CHUNK):
            await gate.wait()  # a blackhole holds what was read until restore()
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


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
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
