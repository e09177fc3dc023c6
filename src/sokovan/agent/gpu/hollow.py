"""Hollow GPUs (`sokovan agent --gpus G [--device-faults FILE]`, CONTRACT section 15): G devices
per agent, UUIDs `GPU-hollow-<agent id>-<index>`, model `hollow`, healthy unless FILE has a line
`<agent id> <index>` (read again for every heartbeat, so a test can fail a device and mend it).
They bind like real ones (the kernel's `CUDA_VISIBLE_DEVICES`) but no engine is asked for them."""

from __future__ import annotations

from pathlib import Path

from sokovan.common.gpu import UNHEALTHY, DeviceInfo, hollow_uuid

HOLLOW_MEMORY = 80 * 2**30  # what a hollow device says it has
FAULT_REASON = "marked faulty in the device-faults file"


def read_faults(path: Path | None) -> set[tuple[str, int]]:
    """The `(agent id, index)` pairs `path` lists now (none when it is absent or unreadable)."""
    if path is None:
        return set()
    try:
        text = path.read_text()
    except OSError:
        return set()
    faults: set[tuple[str, int]] = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            faults.add((parts[0], int(parts[1])))
    return faults


def hollow_devices(agent_id: str, count: int, faults: set[tuple[str, int]]) -> list[DeviceInfo]:
    out = []
    for index in range(count):
        faulty = (agent_id, index) in faults
        out.append(
            DeviceInfo(
                id=f"cuda:{index}",
                uuid=hollow_uuid(agent_id, index),
                model="hollow",
                memory=HOLLOW_MEMORY,
                status=UNHEALTHY if faulty else "healthy",
                reason=FAULT_REASON if faulty else None,
                temperature=40.0,
                utilization=0.0,
                memory_used=0,
                power=60.0,
                ecc_uncorrected=1 if faulty else 0,
                compute_capability="9.0",
            )
        )
    return out


class FaultsFile:
    """The device-faults file, read again only when it changed (the fleet asks every tick)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._faults: set[tuple[str, int]] = set()

    def refresh(self) -> set[tuple[str, int]]:
        if self.path is None:
            return self._faults
        try:
            info = self.path.stat()
            stamp = (info.st_mtime_ns, info.st_size)
        except OSError:
            stamp = None
        if stamp != self._stamp:
            self._stamp, self._faults = stamp, read_faults(self.path) if stamp is not None else set()
        return self._faults


class HollowDevices:
    """One agent's hollow devices."""

    real = False

    def __init__(self, agent_id: str, count: int, faults: Path | None = None) -> None:
        self.agent_id = agent_id
        self.count = count
        self.faults = FaultsFile(faults)

    def sample(self) -> list[DeviceInfo]:
        return hollow_devices(self.agent_id, self.count, self.faults.refresh())
