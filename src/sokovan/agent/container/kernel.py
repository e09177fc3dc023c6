"""A live kernel of the container backend: its labels, its container, and its watch and kill."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from sokovan.agent.container.labels import KernelLabels


@dataclass(eq=False)
class ContainerKernel:
    info: KernelLabels
    container_id: str
    pid: int | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    watcher: asyncio.Task[None] | None = None
    killer: asyncio.Task[None] | None = None
    destroy_requested: bool = False
    killed: bool = False

    @property
    def kernel_id(self) -> str:
        return self.info.kernel_id

    @property
    def session_id(self) -> str:
        return self.info.session_id
