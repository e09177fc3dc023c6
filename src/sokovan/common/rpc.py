"""Agent RPC: JSON over HTTP, every request signed with the cluster secret.

A request carries `X-Sokovan-Timestamp`, `X-Sokovan-Nonce`, `X-Sokovan-Signature` and (for the
agent meant, as a hollow fleet serves many on one address) `X-Sokovan-Agent`. The signature is
the HMAC-SHA256 (hex) with the cluster secret of the canonical string (`signing.canonical`)::

    sokovan-rpc-v2\nPOST\n/rpc/<method>\n<agent id or empty>\n<timestamp>\n<nonce>\n<sha256 hex of body>

so a captured request cannot be sent to another method (a prepare replayed as a start), another
path or another agent, nor with another body; it is refused `MAX_SKEW` seconds either side of
its time, and within that window the agent refuses its nonce a second time (a replay).

Every answer is signed too, over its status, the request's path and nonce and the answering agent
(`answer_signing`); the client reads an answer only once its signature holds, and treats one that
does not (unsigned, forged, another call's, another agent's) as an unreachable agent.

Batches of kernels go to one agent in calls whose body stays under `BATCH_BODY_LIMIT`, half of
the agent's `MAX_BODY`.

A destroy may carry a `grace` (seconds between SIGTERM and SIGKILL, 0 to 3600, as a preemption
victim's `kill_grace`); without one the agent uses its own `--kill-grace`. `forced` still means
SIGKILL at once, whatever the grace.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import structlog
from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from sokovan.common.answer_signing import answer_problem
from sokovan.common.preemption import MAX_GRACE_PERIOD
from sokovan.common.signing import (
    SKEW,
    canonical,
    format_time,
    new_nonce,
    parse_time,
    sign,
    valid_nonce,
    verify,
    within_skew,
)

log = structlog.get_logger(__name__)

SIGNATURE_HEADER = "X-Sokovan-Signature"
TIMESTAMP_HEADER = "X-Sokovan-Timestamp"
# Which agent behind the address is meant (a hollow fleet serves many on one port). It is part of
# the signed payload, so a signed request cannot be redirected to another agent.
AGENT_HEADER = "X-Sokovan-Agent"
NONCE_HEADER = "X-Sokovan-Nonce"
MAX_SKEW = SKEW
RPC_TAG = "sokovan-rpc-v2"
MAX_BODY = 16 * 2**20  # the largest request body an agent reads (else 413)
BATCH_BODY_LIMIT = MAX_BODY // 2  # what the manager puts in one batched call, with room to spare


class KernelSpec(BaseModel):
    """What an agent needs to prepare or start one kernel."""

    kernel_id: str
    session_id: str
    image: str
    session_type: str = "batch"
    command: str | None = None
    environ: dict[str, str] = Field(default_factory=dict)
    slots: dict[str, str] = Field(default_factory=dict)
    cluster_role: str = "main"
    cluster_idx: int = 0
    # How many kernels the session has (its cluster's size): a container agent derives the cluster's
    # hostnames and launcher variables (`SOKOVAN_CLUSTER_HOSTS`, `WORLD_SIZE`) from it.
    cluster_size: int = 1
    # The UUIDs of the GPUs the manager gave the kernel (CONTRACT section 15): the agent binds
    # exactly these (`CUDA_VISIBLE_DEVICES`, the engine's device requests), none when empty.
    devices: list[str] = Field(default_factory=list)


class CheckAndPullRequest(BaseModel):
    kernels: list[KernelSpec]


class CreateKernelsRequest(BaseModel):
    kernels: list[KernelSpec]


class DestroyKernelsRequest(BaseModel):
    """Stop these kernels: SIGTERM, then SIGKILL after `grace` seconds (None: the agent's own
    `--kill-grace`); `forced`: SIGKILL at once. A kernel already within its grace keeps it: a
    repeated destroy neither restarts nor shortens it, unless `forced`."""

    kernel_ids: list[str]
    forced: bool = False
    grace: float | None = Field(default=None, ge=0, le=MAX_GRACE_PERIOD, allow_inf_nan=False, strict=True)


class ReconcileItem(BaseModel):
    """A kernel whose state the manager wants re-told.

    `phase` is what the manager believes: "pull" (asked to check/pull its image, not started),
    "run" (asked to start, or running), "terminate" (asked to destroy)."""

    kernel_id: str
    session_id: str
    image: str = ""
    phase: Literal["pull", "run", "terminate"]


class ReconcileRequest(BaseModel):
    """Re-publish each kernel's current state as the event that reports it: KernelRunning for a live
    kernel, KernelTerminated for one that ended (its exit code and reason), KernelPrepared /
    KernelImagePullFailed for a "pull" kernel not started yet, KernelTerminated(reason="lost") for a
    "run" kernel the agent does not know, KernelTerminated(reason="unknown") for a "terminate" one."""

    kernels: list[ReconcileItem]


class LogsRequest(BaseModel):
    kernel_id: str


class LogsResponse(BaseModel):
    kernel_id: str
    stdout: str = ""
    stderr: str = ""


class AcceptedResponse(BaseModel):
    accepted: list[str] = Field(default_factory=list)
    # The kernel events the call emitted (`check_and_pull`, `create_kernels`), as the bus carries
    # them; they go out on the bus too (`agent.answers`). Raw objects: the manager validates each
    # one on its own and trusts only those about the kernels it sent to the agent it called.
    events: list[dict[str, Any]] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _without_no_events(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """An answer without events reads as it did before answers carried them."""
        data: dict[str, Any] = handler(self)
        if not data.get("events"):
            data.pop("events", None)
        return data


class RPCError(Exception):
    """The agent could not be reached, refused the call, or answered with an error."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status of the answer, None when there was none


def rpc_path(method: str) -> str:
    return f"/rpc/{method}"


def signed_headers(
    secret: str,
    body: bytes,
    *,
    method: str,
    agent_id: str = "",
    now: float | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """The headers of a `POST /rpc/<method>` with `body`, signed for `agent_id` ("" for none)."""
    ts = format_time(now if now is not None else time.time())
    nonce = nonce if nonce is not None else new_nonce()
    payload = canonical(RPC_TAG, ["POST", rpc_path(method), agent_id], ts, nonce, body)
    headers = {
        "Content-Type": "application/json",
        TIMESTAMP_HEADER: ts,
        NONCE_HEADER: nonce,
        SIGNATURE_HEADER: sign(secret, payload),
    }
    if agent_id:
        headers[AGENT_HEADER] = agent_id
    return headers


@dataclass(frozen=True)
class SignedRequest:
    """What a valid signature vouches for: when it was signed, and its nonce (to refuse it twice)."""

    timestamp: float
    nonce: str


def check_signature(
    secret: str, body: bytes, headers: Any, *, http_method: str, path: str, now: float | None = None
) -> SignedRequest | None:
    """The request's signed time and nonce, or None when its signature is missing or wrong, its
    timestamp malformed (`nan`, `inf`, ...) or outside the skew window. Replays are the caller's
    to refuse (a `NonceStore`)."""
    ts, nonce, sig = headers.get(TIMESTAMP_HEADER), headers.get(NONCE_HEADER), headers.get(SIGNATURE_HEADER)
    timestamp = parse_time(ts)
    if timestamp is None or not valid_nonce(nonce) or not sig:
        return None
    if not within_skew(timestamp, now if now is not None else time.time()):
        return None
    try:
        payload = canonical(RPC_TAG, [http_method, path, headers.get(AGENT_HEADER) or ""], ts, nonce, body)
    except ValueError:
        return None
    return SignedRequest(timestamp, nonce) if verify(secret, payload, sig) else None


# Calls in flight at once, to all agents together. aiohttp's default (100) made the lanes that
# "call every agent at once" call a thousand agents a hundred at a time: the burst of `make bench`
# left thousands of PREPARED sessions waiting for the start lane. Each call holds one socket.
MAX_CONNECTIONS = 1000


class AgentRPCClient:
    """Calls agents by their announced `host:port`; one HTTP session for all of them."""

    def __init__(self, secret: str, timeout: float = 10.0, connections: int = MAX_CONNECTIONS) -> None:
        self._secret = secret
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(
        self, rpc_addr: str, method: str, request: BaseModel, agent_id: str = ""
    ) -> dict[str, Any]:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._connections)
            self._session = aiohttp.ClientSession(timeout=self._timeout, connector=connector)
        body = request.model_dump_json().encode()
        path = rpc_path(method)
        headers = signed_headers(self._secret, body, method=method, agent_id=agent_id)
        try:
            async with self._session.post(f"http://{rpc_addr}{path}", data=body, headers=headers) as resp:
                answer = await resp.read()
                problem = answer_problem(
                    self._secret,
                    answer,
                    resp.headers,
                    status=resp.status,
                    path=path,
                    agent_id=agent_id,
                    nonce=headers[NONCE_HEADER],
                )
                if problem is not None:
                    log.warning(
                        "rpc.answer_refused",
                        method=method,
                        rpc_addr=rpc_addr,
                        agent_id=agent_id,
                        status=resp.status,
                        reason=problem,
                    )
                    raise RPCError(f"{method} on {rpc_addr}: {problem}")
                if resp.status != 200:
                    text = answer.decode(errors="replace")
                    raise RPCError(f"{method} on {rpc_addr}: HTTP {resp.status}: {text[:200]}", resp.status)
                result: dict[str, Any] = json.loads(answer)
                return result
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise RPCError(f"{method} on {rpc_addr}: {exc!r}") from exc

    async def check_and_pull(
        self, rpc_addr: str, kernels: list[KernelSpec], agent_id: str = ""
    ) -> AcceptedResponse:
        request = CheckAndPullRequest(kernels=kernels)
        return await self._accepted(rpc_addr, "check_and_pull", request, agent_id)

    async def create_kernels(
        self, rpc_addr: str, kernels: list[KernelSpec], agent_id: str = ""
    ) -> AcceptedResponse:
        request = CreateKernelsRequest(kernels=kernels)
        return await self._accepted(rpc_addr, "create_kernels", request, agent_id)

    async def destroy_kernels(
        self,
        rpc_addr: str,
        kernel_ids: list[str],
        forced: bool = False,
        agent_id: str = "",
        grace: float | None = None,
    ) -> AcceptedResponse:
        """SIGTERM, SIGKILL after `grace` seconds (None: the agent's own kill grace); `forced`:
        SIGKILL at once."""
        request = DestroyKernelsRequest(kernel_ids=kernel_ids, forced=forced, grace=grace)
        return await self._accepted(rpc_addr, "destroy_kernels", request, agent_id)

    async def reconcile(
        self, rpc_addr: str, items: list[ReconcileItem], agent_id: str = ""
    ) -> AcceptedResponse:
        request = ReconcileRequest(kernels=items)
        return await self._accepted(rpc_addr, "reconcile", request, agent_id)

    async def _accepted(
        self, rpc_addr: str, method: str, request: BaseModel, agent_id: str
    ) -> AcceptedResponse:
        """A call whose answer names the kernels the agent accepted."""
        return AcceptedResponse.model_validate(await self.call(rpc_addr, method, request, agent_id))

    async def logs(self, rpc_addr: str, kernel_id: str, agent_id: str = "") -> LogsResponse:
        raw = await self.call(rpc_addr, "logs", LogsRequest(kernel_id=kernel_id), agent_id)
        return LogsResponse.model_validate(raw)
