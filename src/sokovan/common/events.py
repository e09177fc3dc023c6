"""Events that agents publish on the bus and the manager consumes.

An agent's registration is its first heartbeat: every heartbeat carries the agent's full
description, so a manager that lost its database row (or never saw the first message) learns
the agent again from the next beat. Kernel events are idempotent on the manager side.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from sokovan.common.signing import sign, verify


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class _Event(BaseModel):
    at: dt.datetime = Field(default_factory=utcnow)
    agent_id: str


class AgentHealth(BaseModel):
    """An agent's health summary in each heartbeat. `ok` False (with `problems` saying why) keeps a
    BOOTING agent out of READY and takes a READY one out of placement (DEGRADED) while it lasts."""

    ok: bool = True
    problems: list[str] = Field(default_factory=list)
    work_dir_free: int | None = None  # bytes free where the kernels' directories live
    load1: float | None = None  # the one-minute load average


class AgentHeartbeat(_Event):
    """`seq` only grows within one `boot_id`: a beat that does not is a replay, refused and counted."""

    name: Literal["agent.heartbeat"] = "agent.heartbeat"
    seq: int
    boot_id: str
    agent_class: str = "standard"  # an AgentClass value: which grace period applies
    health: AgentHealth = Field(default_factory=AgentHealth)
    scaling_group: str = "default"
    available_slots: dict[str, str]
    images: list[str]
    rpc_addr: str
    running_kernels: list[str] = Field(default_factory=list)
    kernel_count: int | None = None  # len(running_kernels) when None
    # How many kernels the agent takes at most (None: as many as its slots allow).
    max_kernels: int | None = None


class AgentStopping(_Event):
    name: Literal["agent.stopping"] = "agent.stopping"
    boot_id: str


class _KernelEvent(_Event):
    kernel_id: str
    session_id: str


class KernelPulling(_KernelEvent):
    name: Literal["kernel.pulling"] = "kernel.pulling"


class KernelPrepared(_KernelEvent):
    name: Literal["kernel.prepared"] = "kernel.prepared"


class KernelImagePullFailed(_KernelEvent):
    name: Literal["kernel.image_pull_failed"] = "kernel.image_pull_failed"
    message: str


class KernelRunning(_KernelEvent):
    """The kernel's process runs. `service_addr` (`http://host:port[/path]`) is where the HTTP server
    of an inference kernel answers; None for other kernels and in events of older agents."""

    name: Literal["kernel.running"] = "kernel.running"
    pid: int | None = None
    service_addr: str | None = None


class KernelCreationFailed(_KernelEvent):
    name: Literal["kernel.creation_failed"] = "kernel.creation_failed"
    message: str


class KernelTerminated(_KernelEvent):
    """The kernel's process is gone.

    `reason` is "exited" when the process ended on its own, "destroyed" when the manager asked
    for it, "oom" when it was killed for memory, "unknown" when the agent does not know a kernel it
    was asked to destroy, "lost" when it does not know a kernel the manager believes it runs.
    """

    name: Literal["kernel.terminated"] = "kernel.terminated"
    exit_code: int | None = None
    reason: Literal["exited", "destroyed", "oom", "unknown", "lost"] = "exited"


AgentEvent = Annotated[
    AgentHeartbeat
    | AgentStopping
    | KernelPulling
    | KernelPrepared
    | KernelImagePullFailed
    | KernelRunning
    | KernelCreationFailed
    | KernelTerminated,
    Field(discriminator="name"),
]
_adapter: TypeAdapter[AgentEvent] = TypeAdapter(AgentEvent)

KERNEL_EVENT_TYPES = (
    KernelPulling,
    KernelPrepared,
    KernelImagePullFailed,
    KernelRunning,
    KernelCreationFailed,
    KernelTerminated,
)


class BadEvent(ValueError):
    """A bus message that is unsigned, wrongly signed or malformed."""


def encode_event(event: BaseModel, secret: str) -> dict[str, str]:
    """The fields of one stream entry: the JSON body and its signature."""
    data = event.model_dump_json()
    return {"data": data, "sig": sign(secret, data.encode())}


def decode_event(fields: dict[Any, Any], secret: str) -> AgentEvent:
    raw = fields.get(b"data", fields.get("data"))
    sig = fields.get(b"sig", fields.get("sig"))
    if isinstance(raw, bytes):
        raw = raw.decode()
    if isinstance(sig, bytes):
        sig = sig.decode()
    if not isinstance(raw, str) or not verify(secret, raw.encode(), sig):
        raise BadEvent("event without a valid cluster-secret signature")
    try:
        return _adapter.validate_python(json.loads(raw))
    except (ValueError, TypeError) as exc:
        raise BadEvent(f"malformed event: {exc}") from exc
