"""An RPC server with a stub agent behind it, and a raw HTTP client that sends a request's head
and as much of its body as a test wants (a slow or silent sender)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from sokovan.agent.rpc_server import RPCServer, single_agent
from sokovan.common.rpc import (
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    AcceptedResponse,
    CheckAndPullRequest,
    CreateKernelsRequest,
    DestroyKernelsRequest,
    LogsRequest,
    LogsResponse,
    ReconcileRequest,
)
from sokovan.common.signing import format_time, new_nonce

SECRET = "rpc-stub-secret"


class StubAgent:
    """Answers `ping` only (what these tests call)."""

    agent_id = "stub-agent"

    async def check_and_pull(self, request: CheckAndPullRequest) -> AcceptedResponse:
        raise NotImplementedError

    async def create_kernels(self, request: CreateKernelsRequest) -> AcceptedResponse:
        raise NotImplementedError

    async def destroy_kernels(self, request: DestroyKernelsRequest) -> AcceptedResponse:
        raise NotImplementedError

    async def reconcile(self, request: ReconcileRequest) -> AcceptedResponse:
        raise NotImplementedError

    async def logs(self, request: LogsRequest) -> LogsResponse | None:
        raise NotImplementedError


@asynccontextmanager
async def stub_server(**options: Any) -> AsyncIterator[RPCServer]:
    server = RPCServer(single_agent(StubAgent()), SECRET, "127.0.0.1", 0, **options)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def plausible_headers() -> dict[str, str]:
    """Headers that look signed (fresh time, a nonce, 64 hex digits) but whose signature is wrong:
    only the body's hash could tell."""
    return {
        TIMESTAMP_HEADER: format_time(time.time()),
        NONCE_HEADER: new_nonce(),
        SIGNATURE_HEADER: "ab" * 32,
    }


class RawRequest:
    """One `POST /rpc/<method>` on its own connection, written by hand."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def send_head(cls, port: int, method: str, headers: Mapping[str, str], length: int) -> RawRequest:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        lines = [
            f"POST /rpc/{method} HTTP/1.1",
            f"Host: 127.0.0.1:{port}",
            f"Content-Length: {length}",
            *(f"{name}: {value}" for name, value in {"Content-Type": "application/json", **headers}.items()),
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def status(self, within: float = 5.0) -> int:
        """The status of the answer, which must come `within` seconds."""
        line = await asyncio.wait_for(self.reader.readline(), within)
        return int(line.split()[1])

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass
