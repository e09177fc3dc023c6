"""The health summary an agent puts in every heartbeat (`AgentHealth`).

A process agent checks the free space where its kernels' directories live: below `min_free_disk`
(`--min-free-disk`, default 64 MiB) it is unhealthy, with a problem naming the shortfall, so the
manager keeps it out of READY (and out of placement) until space is back. The one-minute load
average goes along for operators. A hollow fleet reports its agents healthy: it has no disks of
its own to check, and one load reading per second is shared by all of them (`FleetHealth`).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from sokovan.common.events import AgentHealth
from sokovan.common.slots import SlotError, parse_amount

DEFAULT_MIN_FREE_DISK = 64 * 2**20
FLEET_REFRESH = 1.0  # seconds a fleet's shared health summary is reused


def parse_size(value: object) -> int:
    """Bytes from `67108864`, `"64m"`, `"1.5g"`, `"500t"` (at most 1e15, the bound of every slot
    amount); ValueError for anything else."""
    try:
        return int(parse_amount("mem", value))
    except SlotError as exc:
        raise ValueError(f"{value!r} is not a size like '64m' or a number of bytes") from exc


def load1() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def check_health(work_dir: Path, min_free_disk: int) -> AgentHealth:
    """The agent's health now: its work directory's free space against `min_free_disk`."""
    problems: list[str] = []
    try:
        free: int | None = shutil.disk_usage(work_dir).free
    except OSError as exc:
        free = None
        problems.append(f"cannot read the free space of {work_dir}: {exc.strerror or exc}")
    if free is not None and free < min_free_disk:
        problems.append(f"{free} bytes free in {work_dir}, below the minimum of {min_free_disk}")
    return AgentHealth(ok=not problems, problems=problems, work_dir_free=free, load1=load1())


class FleetHealth:
    """One healthy summary for every agent of a hollow fleet, its load refreshed once a second."""

    def __init__(self) -> None:
        self._summary = AgentHealth(load1=load1())
        self._at = time.monotonic()

    def current(self) -> AgentHealth:
        now = time.monotonic()
        if now - self._at >= FLEET_REFRESH:
            self._summary, self._at = AgentHealth(load1=load1()), now
        return self._summary
