"""Agent RPC: JSON over HTTP, every request signed with the cluster secret.

The signature covers a timestamp and the body, so a captured request cannot be replayed after
`MAX_SKEW` seconds, and a caller without the secret is refused before anything runs.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal

import aiohttp
from pydantic import BaseModel, Field

from sokovan.common.signing import sign, verify

SIGNATURE_HEADER = "X-Sokovan-Signature"
TIMESTAMP_HEADER = "X-Sokovan-Timestamp"
# Which agent behind the address is meant (a hollow fleet serves many on one port). It is part of
# the signed payload, so a signed request cannot be redirected to another agent.
AGENT_HEADER = "X-Sokovan-Agent"
MAX_SKEW = 300.0


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


class CheckAndPullRequest(BaseModel):
    kernels: list[KernelSpec]


class CreateKernelsRequest(BaseModel):
    kernels: list[KernelSpec]


class DestroyKernelsRequest(BaseModel):
    kernel_ids: list[str]
    forced: bool = False


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


class RPCError(Exception):
    """The agent could not be reached, refused the call, or answered with an error."""


def _payload(ts: str, agent_id: str, body: bytes) -> bytes:
    head = f"{ts}\n{agent_id}\n" if agent_id else f"{ts}\n"
    return head.encode() + body


def signed_headers(secret: str, body: bytes, now: float | None = None, agent_id: str = "") -> dict[str, str]:
    ts = f"{now if now is not None else time.time():.3f}"
    headers = {
        "Content-Type": "application/json",
        TIMESTAMP_HEADER: ts,
        SIGNATURE_HEADER: sign(secret, _payload(ts, agent_id, body)),
    }
    if agent_id:
        headers[AGENT_HEADER] = agent_id
    return headers


def check_signature(secret: str, body: bytes, headers: Any, now: float | None = None) -> bool:
    ts = headers.get(TIMESTAMP_HEADER)
    sig = headers.get(SIGNATURE_HEADER)
    if not ts or not sig:
        return False
    try:
        skew = abs((now if now is not None else time.time()) - float(ts))
    except ValueError:
        return False
    if skew > MAX_SKEW:
        return False
    return verify(secret, _payload(ts, headers.get(AGENT_HEADER) or "", body), sig)


class AgentRPCClient:
    """Calls agents by their announced `host:port`; one HTTP session for all of them."""

    def __init__(self, secret: str, timeout: float = 10.0) -> None:
        self._secret = secret
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(
        self, rpc_addr: str, method: str, request: BaseModel, agent_id: str = ""
    ) -> dict[str, Any]:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        body = request.model_dump_json().encode()
        url = f"http://{rpc_addr}/rpc/{method}"
        try:
            async with self._session.post(
                url, data=body, headers=signed_headers(self._secret, body, agent_id=agent_id)
            ) as resp:
                text = await resp.text()
                if resp.status != 200:
                    raise RPCError(f"{method} on {rpc_addr}: HTTP {resp.status}: {text[:200]}")
                result: dict[str, Any] = json.loads(text)
                return result
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError) as exc:
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
        self, rpc_addr: str, kernel_ids: list[str], forced: bool = False, agent_id: str = ""
    ) -> AcceptedResponse:
        request = DestroyKernelsRequest(kernel_ids=kernel_ids, forced=forced)
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
