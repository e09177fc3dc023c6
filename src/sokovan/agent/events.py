"""Kernel events both agent kinds build alike (a real agent's `ProcessBackend`, a hollow fleet's
`HollowAgent`): the ids every kernel event carries, the words for an image the agent does not
have, what is kept of a kernel that ended, and what destroying a kernel that is not running answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from sokovan.common.events import KernelTerminated

EndReason = Literal["exited", "destroyed", "oom", "lost"]  # "lost": ended without a trace


class KernelIds(Protocol):
    """A kernel spec, a reconcile item, a live kernel: anything that names a kernel and its session."""

    @property
    def kernel_id(self) -> str: ...

    @property
    def session_id(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Ended:
    """What an agent remembers of a kernel that ended (for destroy, logs and reconcile)."""

    session_id: str
    exit_code: int | None
    reason: EndReason


def kernel_ids(agent_id: str, kernel: KernelIds) -> dict[str, str]:
    """The fields every kernel event of `kernel` on this agent starts with."""
    return {"agent_id": agent_id, "kernel_id": kernel.kernel_id, "session_id": kernel.session_id}


def image_unavailable(image: str, agent_id: str) -> str:
    return f"image {image!r} is not available on agent {agent_id}"


def destroyed_again(agent_id: str, kernel_id: str, ended: Ended | None) -> KernelTerminated:
    """The answer to destroying a kernel that is not running: its end again, now as "destroyed",
    or "unknown" (with no session) for a kernel the agent does not remember."""
    return KernelTerminated(
        agent_id=agent_id,
        kernel_id=kernel_id,
        session_id=ended.session_id if ended else "",
        exit_code=ended.exit_code if ended else None,
        reason="destroyed" if ended else "unknown",
    )
