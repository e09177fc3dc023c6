"""Whether a kernel was killed for memory: the OOM killer's counters, read before and after.

A kernel records the count when it starts (its "OOM mark", kept in the state file too, so the
answer survives an agent restart); an unrequested SIGKILL (exit code 137) while the count went up
is called OOM. Without readable counters nothing is called OOM.
"""

from __future__ import annotations

import signal
from pathlib import Path

SIGKILL_EXIT = 128 + signal.SIGKILL


def oom_kill_count() -> int | None:
    """How many processes the kernel's OOM killer has killed (host-wide and in our cgroup).

    None when neither counter can be read."""
    total: int | None = None
    for path, prefix in ((Path("/proc/vmstat"), "oom_kill "), (_cgroup_events(), "oom_kill ")):
        try:
            for line in path.read_text().splitlines():
                if line.startswith(prefix):
                    total = (total or 0) + int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total


def killed_for_memory(exit_code: int | None, mark: int | None) -> bool:
    """Whether an exit with `exit_code` of a kernel that started at OOM count `mark` was an OOM kill."""
    if exit_code != SIGKILL_EXIT or mark is None:
        return False
    now = oom_kill_count()
    return now is not None and now > mark


def _cgroup_events() -> Path:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return Path("/sys/fs/cgroup") / line[3:].lstrip("/") / "memory.events"
    except OSError:
        pass
    return Path("/nonexistent")
