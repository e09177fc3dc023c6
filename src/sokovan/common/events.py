"""Events that agents publish on the bus and the manager consumes.

An agent's registration is its first heartbeat: every heartbeat carries the agent's full
description, so a manager that lost its database row (or never saw the first message) learns
the agent again from the next beat. Kernel events are idempotent on the manager side.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from sokovan.common.gpu import DeviceInfo
from sokovan.common.signing import canonical, format_time, new_nonce, parse_time, sign, valid_nonce, verify


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


# How an agent runs kernels (`AgentHeartbeat.backend`); the manager stores any other value as "process".
AGENT_BACKENDS = ("container", "process", "hollow")


class AgentHeartbeat(_Event):
    """`seq` only grows within one `boot_id`: a beat that does not is a replay, refused and counted.

    `images` are the references of the images the agent holds (a process agent: its catalog's
    names) and `registries` those it may pull from, its default first (none for process and hollow
    agents); the manager stores both as one list (`common.image_refs.stored_images`). `backend`
    says how the agent runs kernels, for the API only: placement reads none of it."""

    name: Literal["agent.heartbeat"] = "agent.heartbeat"
    seq: int
    boot_id: str
    agent_class: str = "standard"  # an AgentClass value: which grace period applies
    health: AgentHealth = Field(default_factory=AgentHealth)
    scaling_group: str = "default"
    available_slots: dict[str, str]
    images: list[str]
    registries: list[str] = Field(default_factory=list)
    backend: str = "process"
    rpc_addr: str
    running_kernels: list[str] = Field(default_factory=list)
    kernel_count: int | None = None  # len(running_kernels) when None
    # How many kernels the agent takes at most (None: as many as its slots allow).
    max_kernels: int | None = None
    devices: list[DeviceInfo] = Field(default_factory=list)  # its GPUs (CONTRACT section 15)


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
    of an inference kernel answers; None for other kernels and in events of older agents. A
    container agent also names the `image` the kernel runs, resolved against its default registry
    (`127.0.0.1:5000/python:3`), and that image's manifest digest (`image_digest`, `sha256:…`);
    None where the agent does not know them (process and hollow agents)."""

    name: Literal["kernel.running"] = "kernel.running"
    pid: int | None = None
    service_addr: str | None = None
    image: str | None = None
    image_digest: str | None = None


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


def parse_event(data: object) -> AgentEvent | None:
    """The event a JSON object (e.g. one an RPC answer carries) stands for; None when it is not one."""
    try:
        return _adapter.validate_python(data)
    except ValueError:  # pydantic's ValidationError is one
        return None


class BadEvent(ValueError):
    """A bus message that is unsigned, wrongly signed or malformed; `reason` says which, for the
    refusal count ("signature", "time", "malformed")."""

    def __init__(self, message: str, reason: str = "signature") -> None:
        super().__init__(message)
        self.reason = reason


# A stream entry is `{"data": <event JSON>, "ts": <time>, "nonce": <nonce>, "sig": <signature>}`, the
# signature covering `signing.canonical(EVENT_TAG, [EVENT_KIND], ts, nonce, data)`.
EVENT_TAG = "sokovan-bus-v2"
EVENT_KIND = "agent.event"


@dataclass(frozen=True)
class SealedEvent:
    """An event whose signature holds, with the time it was signed and its nonce: the consumer
    judges freshness and replay (`bus.streams`)."""

    event: AgentEvent
    timestamp: float
    nonce: str


def seal(data: str, secret: str, now: float | None = None, nonce: str | None = None) -> dict[str, str]:
    """The fields of one stream entry carrying the event JSON `data`, signed now."""
    ts = format_time(now if now is not None else time.time())
    nonce = nonce if nonce is not None else new_nonce()
    return {
        "data": data,
        "ts": ts,
        "nonce": nonce,
        "sig": sign(secret, canonical(EVENT_TAG, [EVENT_KIND], ts, nonce, data.encode())),
    }


def encode_event(event: BaseModel, secret: str) -> dict[str, str]:
    """The fields of one stream entry: the JSON body, when and with which nonce it was signed,
    and the signature."""
    return seal(event.model_dump_json(), secret)


def _text(fields: dict[Any, Any], name: str) -> object:
    value = fields.get(name.encode(), fields.get(name))
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return None
    return value


def open_event(fields: dict[Any, Any], secret: str) -> SealedEvent:
    """The event of a stream entry whose signature holds; BadEvent otherwise (the time it names
    is checked to be a well-formed finite time, not yet to be recent)."""
    raw, ts, nonce, sig = (_text(fields, n) for n in ("data", "ts", "nonce", "sig"))
    timestamp = parse_time(ts)
    if not (isinstance(raw, str) and isinstance(ts, str) and isinstance(nonce, str) and isinstance(sig, str)):
        raise BadEvent("event without a signed envelope (data, ts, nonce, sig)")
    if timestamp is None or not valid_nonce(nonce):
        raise BadEvent(f"event signed with a malformed time {ts[:40]!r} or nonce {nonce[:40]!r}", "time")
    if not verify(secret, canonical(EVENT_TAG, [EVENT_KIND], ts, nonce, raw.encode()), sig):
        raise BadEvent("event without a valid cluster-secret signature")
    try:
        event = _adapter.validate_python(json.loads(raw))
    except (ValueError, TypeError) as exc:
        raise BadEvent(f"malformed event: {exc}", "malformed") from exc
    return SealedEvent(event, timestamp, nonce)


def decode_event(fields: dict[Any, Any], secret: str) -> AgentEvent:
    """The event of a stream entry whose signature holds (freshness not judged); BadEvent otherwise."""
    return open_event(fields, secret).event
