"""A live kernel of the process backend, and why one ended."""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import dataclass, field

from sokovan.agent.events import EndReason
from sokovan.agent.oom import killed_for_memory
from sokovan.agent.state_file import KernelRecord


@dataclass
class ProcessKernel:
    record: KernelRecord
    proc: subprocess.Popen[bytes] | None = None  # None: started by an earlier run of the agent
    destroy_requested: bool = False
    killed: bool = False  # this agent sent the group a SIGKILL
    killer: asyncio.Task[None] | None = None
    watcher: asyncio.Task[None] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def kernel_id(self) -> str:
        return self.record.kernel_id

    @property
    def session_id(self) -> str:
        return self.record.session_id

    @property
    def pid(self) -> int:
        return self.record.pid


def end_reason(exit_code: int | None, oom_mark: int | None, destroy_requested: bool) -> EndReason:
    """Why a kernel ended: asked for, killed for memory, gone without a trace ("lost"), or exited."""
    if destroy_requested:
        return "destroyed"
    if exit_code is None:
        return "lost"
    return "oom" if killed_for_memory(exit_code, oom_mark) else "exited"
