"""The agent's state file: the kernels it runs, so that a restarted agent finds them again.

The file (`--state-file`, default `<work_dir>/agent-state.json`) is rewritten whole, atomically
(a temporary file renamed over it; not fsynced: the kernels would not survive a crash of the machine
either), whenever a kernel starts or ends and when the agent
stops; so even an agent killed with SIGKILL leaves a file naming every kernel that was running.
Each kernel is recorded with its wrapper's pid and that pid's start time (to tell the kernel from a
process that reused its number), its inference port and service address, its directory and the
OOM-kill count from when it started.

A missing file is an agent's first start; an unreadable or malformed one is logged and treated as
empty (the kernels it named cannot be found again; the manager reconciles them as lost). So is one
that is not the agent's own (a symlink, not a regular file, owned by another uid, or writable by
group or others): a root agent would otherwise kill the pids and chown to the uids it names. The
file is written with mode 0600.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import structlog
from pydantic import BaseModel, ValidationError

from sokovan.agent.work_dir import own_problem

log = structlog.get_logger(__name__)

FILE_NAME = "agent-state.json"
VERSION = 1


class KernelRecord(BaseModel):
    """One running kernel as the state file keeps it."""

    kernel_id: str
    session_id: str
    pid: int
    pid_start: int | None
    directory: str
    port: int | None = None
    service_addr: str | None = None
    oom_mark: int | None = None
    uid: int | None = None  # the session's uid the kernel runs under (None: the agent's own)


class AgentState(BaseModel):
    version: int = VERSION
    agent_id: str
    kernels: list[KernelRecord]


def default_path(work_dir: Path) -> Path:
    return work_dir / FILE_NAME


class StateFile:
    """Reads and atomically rewrites one agent's state file."""

    def __init__(self, path: Path, agent_id: str) -> None:
        self.path = path
        self.agent_id = agent_id

    def load(self) -> list[KernelRecord]:
        """The kernels the file names; [] when there is no file or it cannot be used."""
        try:
            raw = self._read_own()
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("agent.state_unreadable", path=str(self.path), error=str(exc))
            return []
        if raw is None:
            return []
        try:
            state = AgentState.model_validate_json(raw)
        except ValidationError as exc:
            log.warning("agent.state_malformed", path=str(self.path), error=str(exc))
            return []
        if state.agent_id != self.agent_id:
            log.warning("agent.state_of_another_agent", path=str(self.path), agent_id=state.agent_id)
            return []
        return state.kernels

    def _read_own(self) -> bytes | None:
        """The file's bytes; None (with a warning) when it is not the agent's own to trust."""
        # O_NOFOLLOW: not a symlink's target; O_NONBLOCK: a FIFO planted there does not hang us.
        fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            problem = own_problem(info) if stat.S_ISREG(info.st_mode) else "not a regular file"
            if problem is not None:
                log.warning("agent.state_untrusted", path=str(self.path), problem=problem)
                return None
            return f.read()

    def save(self, kernels: list[KernelRecord]) -> None:
        """Replace the file with `kernels`; a failure is logged (the kernels keep running)."""
        data = AgentState(agent_id=self.agent_id, kernels=kernels).model_dump_json(indent=1)
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)  # a fresh file of the agent's own, never one found there
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            with os.fdopen(os.open(temporary, flags, 0o600), "w") as f:
                f.write(data)
            os.replace(temporary, self.path)
        except OSError as exc:
            log.error("agent.state_write_failed", path=str(self.path), error=str(exc))
