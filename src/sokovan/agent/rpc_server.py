"""The agent's RPC server: `POST /rpc/{method}`, JSON bodies signed with the cluster secret.

The signature is checked before anything else: an unsigned, wrongly signed or stale request is
answered 401 and nothing runs; so is a replay, a request whose nonce this process accepted
already within the skew window (counted in `sokovan_rpc_replays_refused_total`), or one signed
before the agent restarted (`rpc_guard`). What the headers can tell is checked before the body is
read, and the bodies read before their signature is checked are bounded (`rpc_guard`). The signature
covers the HTTP method and the path (see `common.rpc`), so a request signed for one method is
refused on another. Then the request is routed by its `X-Sokovan-Agent` header (part
of the signed payload) to one of the agents this address serves: a real agent takes requests
without the header or with its own id, a hollow fleet the ids of its virtual agents; any other
id is 404 and nothing runs. Then an unknown method is 404 and a body that does not validate is
400; every error is a JSON object `{"error": ...}`.

Every answer, an error as much as a success, is signed with the cluster secret over its status,
the path, the request's nonce and the id of the agent that answers (`common.answer_signing`), so
the manager can tell it from the answer of whatever else holds this port.

A hollow fleet also serves its inference kernels' endpoints on this port (`extra_routes`, see
`hollow_services`); those are not RPC, carry no signature and reach no RPC method.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import structlog
from aiohttp import web
from pydantic import BaseModel, ValidationError

from sokovan.agent.answers import Answer, answering
from sokovan.agent.rpc_guard import MAX_READS, READ_TIMEOUT, UNAUTHENTICATED, NonceFloor, refusal
from sokovan.common.answer_signing import answer_headers
from sokovan.common.metrics import RPC_REPLAYS_REFUSED
from sokovan.common.rpc import (
    AGENT_HEADER,
    MAX_BODY,
    NONCE_HEADER,
    AcceptedResponse,
    CheckAndPullRequest,
    CreateKernelsRequest,
    DestroyKernelsRequest,
    LogsRequest,
    LogsResponse,
    ReconcileRequest,
    check_signature,
)
from sokovan.common.signing import NonceStore

log = structlog.get_logger(__name__)

# The nonces accepted by this process: every RPC server in it (a hollow fleet's, or tests' many
# agents) shares them, as nonces are random and a replay to a sibling is a replay too.
PROCESS_NONCES = NonceStore()


class AgentRPCHandlers(Protocol):
    """What the server dispatches to; the daemon and every hollow agent implement it."""

    agent_id: str

    async def check_and_pull(self, request: CheckAndPullRequest) -> AcceptedResponse: ...

    async def create_kernels(self, request: CreateKernelsRequest) -> AcceptedResponse: ...

    async def destroy_kernels(self, request: DestroyKernelsRequest) -> AcceptedResponse: ...

    async def reconcile(self, request: ReconcileRequest) -> AcceptedResponse: ...

    async def logs(self, request: LogsRequest) -> LogsResponse | None: ...


class _NotFound(Exception):
    pass


# The agent named by the request's X-Sokovan-Agent header ("" when absent), or None: not served here.
Route = Callable[[str], AgentRPCHandlers | None]
Method = Callable[[AgentRPCHandlers, bytes], Awaitable[BaseModel | dict[str, Any]]]


def single_agent(handlers: AgentRPCHandlers) -> Route:
    """The route of a real agent: requests without the header, or naming this agent."""

    def route(agent_id: str) -> AgentRPCHandlers | None:
        return handlers if agent_id in ("", handlers.agent_id) else None

    return route


def _error(status: int, message: str, *, close: bool = False) -> web.Response:
    """`close`: the body was not read, so the connection is closed rather than drained."""
    response = web.json_response({"error": message}, status=status)
    if close:
        response.force_close()
    return response


async def _ping(handlers: AgentRPCHandlers, body: bytes) -> dict[str, Any]:
    return {"agent_id": handlers.agent_id}


async def _check_and_pull(handlers: AgentRPCHandlers, body: bytes) -> BaseModel:
    request = CheckAndPullRequest.model_validate_json(body or b"{}")
    with answering() as answer:
        response = await handlers.check_and_pull(request)
    return _with_events(response, answer)


async def _create_kernels(handlers: AgentRPCHandlers, body: bytes) -> BaseModel:
    request = CreateKernelsRequest.model_validate_json(body or b"{}")
    with answering() as answer:
        response = await handlers.create_kernels(request)
    return _with_events(response, answer)


def _with_events(response: AcceptedResponse, answer: Answer) -> AcceptedResponse:
    """The answer with the kernel events the call emitted (`agent.answers`)."""
    if answer.events:
        response.events = answer.events
    return response


async def _destroy_kernels(handlers: AgentRPCHandlers, body: bytes) -> BaseModel:
    return await handlers.destroy_kernels(DestroyKernelsRequest.model_validate_json(body or b"{}"))


async def _reconcile(handlers: AgentRPCHandlers, body: bytes) -> BaseModel:
    return await handlers.reconcile(ReconcileRequest.model_validate_json(body or b"{}"))


async def _logs(handlers: AgentRPCHandlers, body: bytes) -> BaseModel:
    request = LogsRequest.model_validate_json(body or b"{}")
    response = await handlers.logs(request)
    if response is None:
        raise _NotFound(f"unknown kernel {request.kernel_id!r}")
    return response


METHODS: dict[str, Method] = {
    "ping": _ping,
    "check_and_pull": _check_and_pull,
    "create_kernels": _create_kernels,
    "destroy_kernels": _destroy_kernels,
    "reconcile": _reconcile,
    "logs": _logs,
}


class RPCServer:
    """Serves the RPC of one agent, or of many, on `host:port` (port 0 picks a free one).

    `route` maps the X-Sokovan-Agent header to the agent that serves the request (see
    `single_agent`); the daemon passes its own, a hollow fleet a lookup in its agents.
    `extra_routes` adds unsigned routes outside `/rpc/` (a hollow fleet's kernel endpoints).
    `max_body` is the largest body read (else 413); `nonces` where accepted nonces are kept;
    `floor_file` where the newest accepted signed time is kept across restarts (None: nowhere);
    `max_reads` how many bodies are read at once before their signature is checked (more: 503),
    each within `read_timeout` seconds (else 408); see `rpc_guard`.
    """

    def __init__(
        self,
        route: Route,
        secret: str,
        host: str,
        port: int,
        extra_routes: Callable[[web.Application], None] | None = None,
        *,
        max_body: int = MAX_BODY,
        nonces: NonceStore = PROCESS_NONCES,
        floor_file: Path | None = None,
        max_reads: int = MAX_READS,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        self._route = route
        self._extra_routes = extra_routes
        self._secret = secret
        self._host = host
        self._port = port
        self._max_body = max_body
        self._nonces = nonces
        self._floor_file = floor_file
        self._floor = NonceFloor(None, time.time())
        self._reads = asyncio.Semaphore(max_reads)
        self._read_timeout = read_timeout
        self._runner: web.AppRunner | None = None
        self.bound_port: int | None = None

    async def start(self) -> None:
        self._floor = NonceFloor(self._floor_file, time.time())
        app = web.Application(client_max_size=self._max_body)
        app.router.add_post("/rpc/{method}", self._dispatch)
        if self._extra_routes is not None:
            self._extra_routes(app)
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

    async def _read(self, request: web.Request) -> bytes | web.Response:
        """The body, read within the bounds of `rpc_guard`; or the answer refusing it."""
        if self._reads.locked():
            log.warning("rpc.too_many_reads", peer=request.remote)
            return _error(503, "too many requests being read at once: try again", close=True)
        async with self._reads:
            try:
                async with asyncio.timeout(self._read_timeout):
                    return await request.read()
            except TimeoutError:
                log.warning("rpc.read_timeout", peer=request.remote)
                return _error(408, f"request body not sent within {self._read_timeout:g} s", close=True)
            except web.HTTPRequestEntityTooLarge:
                return _error(413, f"request body over {self._max_body} bytes", close=True)

    async def _dispatch(self, request: web.Request) -> web.Response:
        """The answer to one RPC request, signed whatever it says (`common.answer_signing`)."""
        response = await self._serve(request)
        body = response.body
        if not isinstance(body, bytes):  # every answer here is JSON text
            raise TypeError(f"an RPC answer's body is {type(body).__name__}, not bytes")
        response.headers.update(
            answer_headers(
                self._secret,
                body,
                status=response.status,
                path=request.path,
                agent_id=self._answering(request.headers.get(AGENT_HEADER) or ""),
                request_nonce=request.headers.get(NONCE_HEADER),
            )
        )
        return response

    def _answering(self, named: str) -> str:
        """The id of the agent that answers a request naming `named` ("": none): the one it is
        routed to, else (no agent here by that name) the one it names."""
        handlers = self._route(named)
        return handlers.agent_id if handlers is not None else named

    async def _serve(self, request: web.Request) -> web.Response:
        method_name = request.match_info["method"]
        refused = refusal(
            request.headers, request.content_length, self._max_body, time.time(), self._floor.floor
        )
        if refused is not None:
            log.warning("rpc.refused_unread", method=method_name, status=refused[0], peer=request.remote)
            return _error(*refused, close=True)
        body = await self._read(request)
        if isinstance(body, web.Response):
            return body
        now = time.time()
        signed = check_signature(
            self._secret, body, request.headers, http_method=request.method, path=request.path, now=now
        )
        if signed is None:
            log.warning("rpc.unauthenticated", method=method_name, peer=request.remote)
            return _error(401, UNAUTHENTICATED)
        if not self._nonces.add(signed.nonce, signed.timestamp, now):
            RPC_REPLAYS_REFUSED.inc()
            log.warning("rpc.replayed", method=method_name, nonce=signed.nonce, peer=request.remote)
            return _error(401, "replayed request: its nonce was seen already")
        self._floor.accepted(signed.timestamp)
        agent_id = request.headers.get(AGENT_HEADER) or ""
        handlers = self._route(agent_id)
        if handlers is None:
            log.warning("rpc.unknown_agent", method=method_name, agent_id=agent_id, peer=request.remote)
            named = repr(agent_id) if agent_id else f"(no {AGENT_HEADER} header)"
            return _error(404, f"unknown agent {named}: this address does not serve it")
        method = METHODS.get(method_name)
        if method is None:
            return _error(404, f"unknown method {method_name!r}")
        try:
            result = await method(handlers, body)
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
