"""The agent's state file: the kernels it runs, so that a restarted agent finds them again.

The file (`--state-file`, default `<work_dir>/agent-state.json`) is rewritten whole, atomically
(a temporary file renamed over it; not fsynced: the kernels would not survive a crash of the machine
either), whenever a kernel starts or ends and when the agent
stops; so even an agent killed with SIGKILL leaves a file naming every kernel that was running.
Each kernel is recorded with its wrapper's pid and that pid's start time (to tell the kernel from a
process that reused its number), its inference port and service address, its directory and the
OOM-kill count from when it started.

A missing file is an agent's first start; an unreadable or malformed one is logged and treated as
empty (the kernels it named cannot be found again; the manager reconciles them as lost).
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog
from pydantic import BaseModel, ValidationError

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
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("agent.state_unreadable", path=str(self.path), error=str(exc))
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

    def save(self, kernels: list[KernelRecord]) -> None:
        """Replace the file with `kernels`; a failure is logged (the kernels keep running)."""
        data = AgentState(agent_id=self.agent_id, kernels=kernels).model_dump_json(indent=1)
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(temporary, "w") as f:
                f.write(data)
            os.replace(temporary, self.path)
        except OSError as exc:
            log.error("agent.state_write_failed", path=str(self.path), error=str(exc))
