"""A hollow fleet's state file (`sokovan agent --simulate N --state-file FILE`): its timer kernels,
so that a restarted fleet takes them over as a restarted process agent takes over its processes.

Per agent id, each live kernel: its id, its session, whether it serves (an inference kernel) and the
wall-clock time its timer ends (none: it runs until destroyed). The fleet rewrites the file
atomically within a moment of any change (at most every `SAVE_EVERY` seconds, not per event: a fleet
may start thousands of kernels a second) and at its stop; so after a SIGKILL the file is at most
that much behind. At the next start every agent of the same id gets its kernels back: a timer that
has not run out goes on with the time left, one that ran out while the fleet was down ends at once
(exit 0, as it would have). A kernel destroyed within its grace keeps it: it ends when its grace
(or reaction time) ends, at once if that passed while the fleet was down. An inference kernel's
service address names the fleet's port: give a fleet that is to be restarted a fixed
`--rpc-port`, or its served kernels move.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import structlog
from pydantic import BaseModel, ValidationError

log = structlog.get_logger(__name__)

VERSION = 1
SAVE_EVERY = 0.5  # seconds: how stale the file may be while kernels start and end


class HollowKernelRecord(BaseModel):
    kernel_id: str
    session_id: str
    ends_at: float | None = None  # time.time() when its timer ends; None: until destroyed
    serves: bool = False  # an inference kernel: served by the fleet while it lives
    ignores_term: bool = False  # its command ignores SIGTERM (see hollow_agent)
    stops_at: float | None = None  # destroyed: time.time() when its grace (or reaction) ends
    stop_exit: int | None = None  # ... and the code it ends with then


class HollowState(BaseModel):
    version: int = VERSION
    agents: dict[str, list[HollowKernelRecord]]


class HollowStateFile:
    """Reads and atomically rewrites one fleet's state file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, list[HollowKernelRecord]]:
        """Kernels per agent id; {} when there is no file or it cannot be used (logged)."""
        try:
            return HollowState.model_validate_json(self.path.read_bytes()).agents
        except FileNotFoundError:
            return {}
        except (OSError, ValidationError) as exc:
            log.warning("hollow.state_unusable", path=str(self.path), error=str(exc))
            return {}

    def save(self, agents: dict[str, list[HollowKernelRecord]]) -> None:
        """Replace the file; a failure is logged (the fleet goes on)."""
        data = HollowState(agents={a: ks for a, ks in agents.items() if ks}).model_dump_json()
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(data)
            os.replace(temporary, self.path)
        except OSError as exc:
            log.error("hollow.state_write_failed", path=str(self.path), error=str(exc))


Snapshot = Callable[[], dict[str, list[HollowKernelRecord]]]


class StateKeeper:
    """Keeps a fleet's state file current: `mark()` on any change, and `run()` (a background task)
    saves a fresh `snapshot()` at most every SAVE_EVERY seconds while changes come."""

    def __init__(self, file: HollowStateFile, snapshot: Snapshot) -> None:
        self.file = file
        self._snapshot = snapshot
        self._dirty = asyncio.Event()

    def mark(self) -> None:
        self._dirty.set()

    def save(self) -> None:
        self._dirty.clear()
        self.file.save(self._snapshot())

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            self.save()
            await asyncio.sleep(SAVE_EVERY)
