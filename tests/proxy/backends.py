"""Tiny real HTTP servers on 127.0.0.1 for the proxy tests: replicas whose health and answers we steer."""

from __future__ import annotations

import asyncio
import socket
import struct

from aiohttp import web

from sokovan.harness import free_port


def dead_endpoint() -> str:
    """An endpoint where nothing listens: connections are refused."""
    return f"http://127.0.0.1:{free_port()}"


class Backend:
    """A replica: `/health` (status and delay steerable), `/whoami`, `/echo/...`, `/stream`, `/broken`,
    `/broken-stream`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.health_status = 200
        self.health_delay = 0.0
        self.health_hits = 0
        self.health_in_flight = 0
        self.health_max_in_flight = 0
        self.hits = 0
        self.release_stream = asyncio.Event()
        self.stream_abandoned = asyncio.Event()  # the reader of /stream went away while it was held
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self, port: int = 0) -> Backend:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self._health)
        app.router.add_get("/stream", self._stream)
        app.router.add_get("/broken", self._broken)
        app.router.add_get("/broken-stream", self._broken_stream)
        app.router.add_route("*", "/whoami", self._whoami)
        app.router.add_route("*", "/echo/{tail:.*}", self._echo)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            self.release_stream.set()
            await self._runner.cleanup()
            self._runner = None

    async def _health(self, request: web.Request) -> web.Response:
        self.health_hits += 1
        self.health_in_flight += 1
        self.health_max_in_flight = max(self.health_max_in_flight, self.health_in_flight)
        try:
            await asyncio.sleep(self.health_delay)
        finally:
            self.health_in_flight -= 1
        return web.Response(status=self.health_status, text="ok" if self.health_status < 300 else "not ok")

    async def _whoami(self, request: web.Request) -> web.Response:
        self.hits += 1
        return web.Response(text=self.name, headers={"X-Backend": self.name})

    async def _echo(self, request: web.Request) -> web.Response:
        self.hits += 1
        body = await request.read()
        response = web.json_response(
            {
                "name": self.name,
                "method": request.method,
                "path": request.rel_url.raw_path,
                "query": request.rel_url.raw_query_string,
                "headers": {k: ", ".join(request.headers.getall(k)) for k in request.headers},
                "body_length": len(body),
                "body_head": body[:64].decode(errors="replace"),
            },
            status=int(request.query.get("status", "200")),
        )
        response.headers.add("Set-Cookie", "a=1")
        response.headers.add("Set-Cookie", "b=2")
        return response

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: one event now, the second only when the test releases it."""
        self.hits += 1
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        out.enable_chunked_encoding()
        await out.prepare(request)
        await out.write(b"data: first\n\n")
        while not self.release_stream.is_set():
            if request.transport is None or request.transport.is_closing():
                self.stream_abandoned.set()
                return out
            await asyncio.sleep(0.02)
        await out.write(b"data: second\n\n")
        await out.write_eof()
        return out

    async def _broken(self, request: web.Request) -> web.StreamResponse:
        """Promises 1000 bytes, sends 10, then drops the connection."""
        out = web.StreamResponse(headers={"Content-Length": "1000"})
        await out.prepare(request)
        await out.write(b"0123456789")
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.close()
        return out

    async def _broken_stream(self, request: web.Request) -> web.StreamResponse:
        """A chunked answer (no length) that sends 10 bytes, then drops the connection."""
        out = web.StreamResponse()
        out.enable_chunked_encoding()
        await out.prepare(request)
        await out.write(b"0123456789")
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.close()
        return out


class Resetter:
    """A replica killed while a request waits in its socket: it accepts connections and, once a
    request arrives, closes them with a reset (SO_LINGER 0), as the kernel does for a process killed
    with unread data."""

    def __init__(self) -> None:
        self.url = ""
        self.resets = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> Resetter:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.resets += 1
        writer.transport.abort()
