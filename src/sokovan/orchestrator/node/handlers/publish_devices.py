"""Publishes the GPU gauges every cycle (CONTRACT section 15); moves nothing.

Per device, from its agent's last heartbeat: healthy (1/0), temperature, utilization, memory used
and uncorrectable ECC errors (`sokovan_gpu_device_*{agent, device}`); per live kernel holding GPUs,
how many (`sokovan_gpu_kernel_devices{agent, kernel, session}`). Only agents that report devices
and kernels that hold some are read; the gauges are rebuilt each cycle, so a device or kernel that
is gone leaves no stale series.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import Gauge
from sqlalchemy import func, select

from sokovan.common.gpu import HEALTHY
from sokovan.common.metrics import (
    GPU_DEVICE_ECC,
    GPU_DEVICE_HEALTHY,
    GPU_DEVICE_MEMORY_USED,
    GPU_DEVICE_TEMPERATURE,
    GPU_DEVICE_UTILIZATION,
    GPU_KERNEL_DEVICES,
)
from sokovan.db.engine import autocommit
from sokovan.db.models import Agent, Kernel
from sokovan.orchestrator.node.handler import AgentRow, FleetGauge, NodeResult
from sokovan.state.occupancy import slot_holding

_READINGS: tuple[tuple[Gauge, str], ...] = (
    (GPU_DEVICE_TEMPERATURE, "temperature"),
    (GPU_DEVICE_UTILIZATION, "utilization"),
    (GPU_DEVICE_MEMORY_USED, "memory_used"),
    (GPU_DEVICE_ECC, "ecc_uncorrected"),
)
_ALL = (GPU_DEVICE_HEALTHY, GPU_KERNEL_DEVICES, *(g for g, _ in _READINGS))


class PublishDevices(FleetGauge):
    async def execute(self, rows: Sequence[AgentRow]) -> NodeResult:
        async with autocommit(self._engine).connect() as conn:
            agents = (
                await conn.execute(
                    select(Agent.id, Agent.devices).where(func.jsonb_array_length(Agent.devices) > 0)
                )
            ).all()
            kernels = (
                await conn.execute(
                    select(Kernel.agent_id, Kernel.id, Kernel.session_id, Kernel.devices).where(
                        Kernel.status.in_(slot_holding()), func.jsonb_array_length(Kernel.devices) > 0
                    )
                )
            ).all()
        for gauge in _ALL:
            gauge.clear()
        for agent_id, devices in agents:
            for device in devices:
                publish(agent_id, device)
        for agent_id, kernel_id, session_id, devices in kernels:
            GPU_KERNEL_DEVICES.labels(agent=agent_id, kernel=str(kernel_id), session=str(session_id)).set(
                len(devices)
            )
        return NodeResult()


def publish(agent_id: str, device: dict[str, Any]) -> None:
    name = str(device.get("id"))
    healthy = device.get("status", HEALTHY) == HEALTHY
    GPU_DEVICE_HEALTHY.labels(agent=agent_id, device=name, uuid=str(device.get("uuid"))).set(
        1 if healthy else 0
    )
    for gauge, key in _READINGS:
        value = device.get(key)
        if isinstance(value, int | float):
            gauge.labels(agent=agent_id, device=name).set(value)
