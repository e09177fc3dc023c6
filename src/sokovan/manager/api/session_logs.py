"""`GET /v2/sessions/{id}/logs`: the tail of each kernel's stdout and stderr, within a cap.

A session may have many kernels; the manager never holds more than `TOTAL_CAP` bytes of their
output for one request. Each stream of each kernel is clipped to its share: the `tail` the caller
asked for (default `DEFAULT_TAIL`, at most `MAX_TAIL`), or less when the kernels together would
pass the total. Agents are asked `FETCH_CONCURRENCY` at a time, and each answer is clipped as it
arrives, so what is in flight is bounded too (an agent itself answers at most its own tail).
"""

from __future__ import annotations

import asyncio
import uuid

import structlog
from aiohttp import web

from sokovan.manager.api.auth import CTX_KEY, principal_of
from sokovan.manager.api.deadline import REQUEST_DEADLINE, deadline
from sokovan.manager.api.openapi import Param, Route
from sokovan.manager.api.problems import Problem, not_found
from sokovan.manager.api.schemas import KernelLogs, LogsResponse
from sokovan.manager.api.session_ref import SESSION_REF, path_session_id
from sokovan.manager.repositories import sessions_read

log = structlog.get_logger(__name__)

DEFAULT_TAIL = 64 * 1024  # bytes per stream per kernel
MAX_TAIL = 1024 * 1024
TOTAL_CAP = 8 * 1024 * 1024  # bytes of output in one answer, all kernels and streams together
FETCH_CONCURRENCY = 8
LOGS_UNAVAILABLE = "the kernel's agent could not be reached for its logs; try again later"


def stream_budget(tail: int, kernels: int) -> int:
    """Bytes each of the 2 x `kernels` streams may carry: `tail`, or an equal share of the total."""
    if kernels <= 0:
        return tail
    return min(tail, TOTAL_CAP // (2 * kernels))


def clip(text: str, budget: int) -> str:
    """The last `budget` bytes of `text` (UTF-8), never splitting a character."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= budget:
        return text
    return data[len(data) - budget :].decode("utf-8", errors="ignore")


def query_tail(request: web.Request) -> int:
    raw = request.query.get("tail")
    if raw is None or raw == "":
        return DEFAULT_TAIL
    try:
        tail = int(raw)
    except ValueError as exc:
        raise Problem(400, "Bad query parameter", f"tail must be an integer, got {raw[:32]!r}") from exc
    if not 0 <= tail <= MAX_TAIL:
        raise Problem(400, "Bad query parameter", f"tail must be between 0 and {MAX_TAIL} bytes")
    return tail


AGENT_WAIT = 10.0  # the longest an agent's answer is waited for (AgentRPCClient's timeout)


@deadline(AGENT_WAIT + REQUEST_DEADLINE)
async def session_logs(request: web.Request) -> web.Response:
    principal = principal_of(request)
    session_id = await path_session_id(request, principal)
    tail = query_tail(request)
    ctx = request.app[CTX_KEY]
    async with ctx.engine.connect() as conn:
        if not await sessions_read.session_is_visible(conn, session_id, principal):
            raise not_found("session", session_id)
        kernels = await sessions_read.kernels_for_logs(conn, session_id)
    placed = [(k, agent, addr) for k, agent, addr in kernels if agent is not None and addr is not None]
    budget = stream_budget(tail, len(placed))
    gate = asyncio.Semaphore(FETCH_CONCURRENCY)

    async def fetch(kernel_id: uuid.UUID, agent_id: str, rpc_addr: str) -> KernelLogs:
        async with gate:
            try:
                got = await ctx.rpc.logs(rpc_addr, str(kernel_id), agent_id)
            except Exception as exc:  # an unreachable agent costs its kernel's logs, not the request
                # The RPC error names internal addresses: logged here, a generic message answered.
                log.warning(
                    "could not fetch kernel logs",
                    kernel_id=str(kernel_id),
                    agent_id=agent_id,
                    rpc_addr=rpc_addr,
                    error=repr(exc),
                )
                return KernelLogs(kernel_id=kernel_id, stdout="", stderr="", error=LOGS_UNAVAILABLE)
            return KernelLogs(
                kernel_id=kernel_id, stdout=clip(got.stdout, budget), stderr=clip(got.stderr, budget)
            )

    items = await asyncio.gather(*(fetch(k, agent, addr) for k, agent, addr in placed))
    return web.Response(
        text=LogsResponse(items=list(items)).model_dump_json(exclude_none=True),
        content_type="application/json",
    )


ROUTE = Route(
    "GET",
    "/v2/sessions/{id}/logs",
    session_logs,
    "stdout/stderr tail of each kernel placed on an agent, each stream clipped to `tail` bytes and "
    f"all of them together to {TOTAL_CAP // 2**20} MiB",
    {200: LogsResponse, 409: None},
    params=(
        SESSION_REF,
        Param(
            "tail",
            "query",
            f"bytes of each stream of each kernel, 0-{MAX_TAIL} (default {DEFAULT_TAIL}); less when "
            f"the kernels together would pass {TOTAL_CAP} bytes",
            {"type": "integer", "minimum": 0, "maximum": MAX_TAIL},
        ),
    ),
)
