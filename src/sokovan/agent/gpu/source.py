"""What the agent asks of its GPUs: the devices as they are now (discovered at start, sampled again
for every heartbeat), and whether their engine binding is real (NVML's) or declared (hollow)."""

from __future__ import annotations

from typing import Protocol

from sokovan.common.gpu import DEVICE_SLOT, DeviceInfo


class DeviceSource(Protocol):
    @property
    def real(self) -> bool:
        """Devices a container engine can be asked for (False: hollow, declared only)."""
        ...

    def sample(self) -> list[DeviceInfo]:
        """Every device with its health now (an empty list: none)."""
        ...


class NoDevices:
    real = False

    def sample(self) -> list[DeviceInfo]:
        return []


def offered_slots(slots: dict[str, str], devices: list[DeviceInfo], fixed: bool) -> dict[str, str]:
    """The agent's slots with `cuda.device` as its healthy devices, unless the operator set it in
    `--slots` (`fixed`) or it has no devices: an unhealthy device takes no new kernel."""
    if fixed or not devices:
        return slots
    return {**slots, DEVICE_SLOT: str(sum(1 for d in devices if d.healthy))}
