"""A GPU as agents report it and the API shows it (CONTRACT section 15).

Agents find their devices through NVML (`agent.gpu.nvml`) or declare hollow ones
(`agent.gpu.hollow`); each heartbeat carries every device with its health, and the agent offers
`cuda.device` slots for its healthy devices only. The manager gives a kernel whole devices by UUID
when it places it (`orchestrator.provisioner.devices`); the agent binds exactly those
(`CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES`, the engine's device requests).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

DEVICE_SLOT = "cuda.device"
HEALTHY: Literal["healthy"] = "healthy"
UNHEALTHY: Literal["unhealthy"] = "unhealthy"


class DeviceInfo(BaseModel):
    """One device: what it is and how it is now."""

    id: str = Field(description="cuda:<index>")
    uuid: str
    model: str
    memory: int = Field(description="bytes")
    status: Literal["healthy", "unhealthy"] = HEALTHY
    reason: str | None = Field(default=None, description="why it is unhealthy")
    temperature: float | None = Field(default=None, description="°C")
    utilization: float | None = Field(default=None, description="percent of the last sample period")
    memory_used: int | None = Field(default=None, description="bytes")
    power: float | None = Field(default=None, description="watts")
    ecc_uncorrected: int | None = Field(default=None, description="uncorrectable ECC errors, volatile")
    compute_capability: str | None = None

    @property
    def healthy(self) -> bool:
        return self.status == HEALTHY


def hollow_uuid(agent_id: str, index: int) -> str:
    """The UUID of a hollow agent's device (CONTRACT section 15)."""
    return f"GPU-hollow-{agent_id}-{index}"


def visible_devices(devices: list[str]) -> dict[str, str]:
    """The variables that bind a kernel to exactly `devices` (empty: to none)."""
    value = ",".join(devices)
    return {"CUDA_VISIBLE_DEVICES": value, "NVIDIA_VISIBLE_DEVICES": value}
