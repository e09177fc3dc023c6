"""The labels the agent puts on what it makes in the engine, and reads back after a restart.

Every container carries its kernel, session and agent ids and what the agent needs to take it over
again without a state file: the published port, the uid, the image it runs and the OOM mark. The
agent only ever lists, stops or removes containers that carry its own agent id; networks carry the
session id (several agents sharing an engine share a session's network).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PREFIX = "org.sokovan."
MANAGED = PREFIX + "managed"
AGENT = PREFIX + "agent-id"
KERNEL = PREFIX + "kernel-id"
SESSION = PREFIX + "session-id"
PORT = PREFIX + "port"
UID = PREFIX + "uid"
IMAGE = PREFIX + "image"
DIGEST = PREFIX + "image-digest"
OOM_MARK = PREFIX + "oom-mark"
SERVICE_ADDR = PREFIX + "service-addr"


@dataclass(frozen=True)
class KernelLabels:
    """What a kernel's container says about it."""

    kernel_id: str
    session_id: str
    agent_id: str
    image: str
    digest: str | None = None
    port: int | None = None
    uid: int | None = None
    oom_mark: int | None = None
    service_addr: str | None = None

    def to_labels(self) -> dict[str, str]:
        out = {
            MANAGED: "1",
            AGENT: self.agent_id,
            KERNEL: self.kernel_id,
            SESSION: self.session_id,
            IMAGE: self.image,
        }
        optional = {
            DIGEST: self.digest,
            PORT: self.port,
            UID: self.uid,
            OOM_MARK: self.oom_mark,
            SERVICE_ADDR: self.service_addr,
        }
        out.update({key: str(value) for key, value in optional.items() if value is not None})
        return out

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> KernelLabels | None:
        """The kernel a container's labels describe; None when they are not a kernel's."""
        try:
            return cls(
                kernel_id=labels[KERNEL],
                session_id=labels[SESSION],
                agent_id=labels[AGENT],
                image=labels.get(IMAGE, ""),
                digest=labels.get(DIGEST),
                port=_int(labels.get(PORT)),
                uid=_int(labels.get(UID)),
                oom_mark=_int(labels.get(OOM_MARK)),
                service_addr=labels.get(SERVICE_ADDR),
            )
        except KeyError:
            return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
