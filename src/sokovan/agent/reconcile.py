"""The one rule both agent kinds use to answer `reconcile`: which event tells a kernel's state now.

A live kernel is KernelRunning (with its `service_addr`, if it serves one); an ended one
KernelTerminated with its exit code and the reason it ended with; a kernel the agent does not know is
judged by what the manager believes: "pull" → KernelPrepared if the image is in the catalog (else
KernelImagePullFailed), "run" → KernelTerminated(reason="lost"), "terminate" →
KernelTerminated(reason="unknown")."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from sokovan.agent.events import image_unavailable, kernel_ids
from sokovan.common.events import KernelImagePullFailed, KernelPrepared, KernelRunning, KernelTerminated
from sokovan.common.rpc import ReconcileItem

EndReason = Literal["exited", "destroyed", "oom", "unknown", "lost"]


def reconcile_event(
    agent_id: str,
    item: ReconcileItem,
    *,
    live: bool,
    pid: int | None = None,
    ended: tuple[int | None, EndReason] | None = None,
    image_available: bool = False,
    service_addr: str | None = None,
) -> BaseModel:
    ids = kernel_ids(agent_id, item)
    if live:
        return KernelRunning(**ids, pid=pid, service_addr=service_addr)
    if ended is not None:
        return KernelTerminated(**ids, exit_code=ended[0], reason=ended[1])
    if item.phase == "pull":
        if image_available:
            return KernelPrepared(**ids)
        return KernelImagePullFailed(**ids, message=image_unavailable(item.image, agent_id))
    if item.phase == "run":
        return KernelTerminated(**ids, exit_code=None, reason="lost")
    return KernelTerminated(**ids, exit_code=None, reason="unknown")
