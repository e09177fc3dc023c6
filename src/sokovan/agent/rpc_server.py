"""The agent's RPC server: `POST /rpc/{method}`, JSON bodies signed with the cluster secret.

The signature is checked before anything else: an unsigned, wrongly signed or stale request is
answered 401 and nothing runs. Then an unknown method is 404 and a body that does not validate
is 400; every error is a JSON object `{"error": ...}`.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog
from aiohttp import web
from pydantic import BaseModel, ValidationError

from sokovan.common.rpc import (
    AcceptedResponse,
    CheckAndPullRequest,
    CreateKernelsRequest,
    DestroyKernelsRequest,
    LogsRequest,
    LogsResponse,
    check_signature,
)

log = structlog.get_logger(__name__)

MAX_BODY = 16 * 2**20


class AgentRPCHandlers(Protocol):
    """What the server dispatches to; the daemon implements it."""

    agent_id: str

    async def check_and_pull(self, request: CheckAndPullRequest) -> AcceptedResponse: ...

    async def create_kernels(self, request: CreateKernelsRequest) -> AcceptedResponse: ...

    async def destroy_kernels(self, request: DestroyKernelsRequest) -> AcceptedResponse: ...

    async def logs(self, request: LogsRequest) -> LogsResponse | None: ...


class _NotFound(Exception):
    pass


Method = Callable[[bytes], Awaitable[BaseModel | dict[str, Any]]]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


class RPCServer:
    """Serves one agent's RPC on `host:port` (port 0 picks a free one; see `rpc_addr`)."""

    def __init__(self, handlers: AgentRPCHandlers, secret: str, host: str, port: int) -> None:
        self._handlers = handlers
        self._secret = secret
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self._methods: dict[str, Method] = {
            "ping": self._ping,
            "check_and_pull": self._wrap(CheckAndPullRequest, handlers.check_and_pull),
            "create_kernels": self._wrap(CreateKernelsRequest, handlers.create_kernels),
            "destroy_kernels": self._wrap(DestroyKernelsRequest, handlers.destroy_kernels),
            "logs": self._logs,
        }
        self.bound_port: int | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/rpc/{method}", self._dispatch)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.bound_port = int(runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def rpc_addr(self) -> str:
        """The `host:port` to announce; a wildcard bind announces the host name."""
        if self.bound_port is None:
            raise RuntimeError("the RPC server is not started")
        host = self._host
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostname()
        elif ":" in host:
            host = f"[{host}]"
        return f"{host}:{self.bound_port}"

    async def _dispatch(self, request: web.Request) -> web.Response:
        body = await request.read()
        method_name = request.match_info["method"]
        if not check_signature(self._secret, body, request.headers):
            log.warning("rpc.unauthenticated", method=method_name, peer=request.remote)
            return _error(401, "missing, invalid or expired cluster-secret signature")
        method = self._methods.get(method_name)
        if method is None:
            return _error(404, f"unknown method {method_name!r}")
        try:
            result = await method(body)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in exc.errors()[:10]
            )
            return _error(400, f"invalid {method_name} request: {problems}")
        except _NotFound as exc:
            return _error(404, str(exc))
        if isinstance(result, BaseModel):
            return web.json_response(text=result.model_dump_json())
        return web.json_response(result)

    @staticmethod
    def _wrap(
        model: type[Any], handler: Callable[[Any], Awaitable[BaseModel]]
    ) -> Callable[[bytes], Awaitable[BaseModel]]:
        async def method(body: bytes) -> BaseModel:
            return await handler(model.model_validate_json(body or b"{}"))

        return method

    async def _ping(self, body: bytes) -> dict[str, Any]:
        return {"agent_id": self._handlers.agent_id}

    async def _logs(self, body: bytes) -> BaseModel:
        request = LogsRequest.model_validate_json(body or b"{}")
        response = await self._handlers.logs(request)
        if response is None:
            raise _NotFound(f"unknown kernel {request.kernel_id!r}")
        return response
