"""What every agent kind shares about kernels (the `ProcessBackend`, the `ContainerBackend`, a
hollow fleet's `HollowAgent`): which kernel ids are acceptable, the ids every kernel event carries,
the words for an image the agent does not have, what is kept of a kernel that ended, what
destroying a kernel that is not running answers, and the SIGTERM-grace-SIGKILL of a destroy.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import structlog
from pydantic import BaseModel

from sokovan.common.events import KernelTerminated

log = structlog.get_logger(__name__)

EndReason = Literal["exited", "destroyed", "oom", "lost"]  # "lost": ended without a trace
Emit = Callable[[BaseModel], None]  # how a backend hands an event to the daemon (non-blocking)
_KERNEL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def valid_kernel_id(kernel_id: str) -> bool:
    """Kernel ids name directories (and containers), so only plain names are accepted."""
    return bool(_KERNEL_ID_RE.match(kernel_id))


async def stop_within_grace(
    done: asyncio.Event,
    term: Callable[[], Awaitable[None]],
    kill: Callable[[], Awaitable[None]],
    *,
    forced: bool,
    grace: float,
    kernel_id: str,
) -> None:
    """A destroy of either backend: `term` (unless `forced`), `kill` once `grace` seconds pass
    without `done`, then wait for `done` (the kernel's end was reported)."""
    if not forced:
        await term()
        try:
            await asyncio.wait_for(done.wait(), grace)
            return
        except TimeoutError:
            log.info("kernel.kill_after_grace", kernel_id=kernel_id, grace=grace)
    await kill()
    await done.wait()


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
