"""NVIDIA GPUs through NVML (`nvidia-ml-py`, NVIDIA's own binding of the driver's library).

The devices are found once, at the agent's start (index, UUID, model, memory, compute capability),
and sampled for every heartbeat: temperature, utilization, memory used, power and the volatile
uncorrectable ECC count. A device is unhealthy while it has uncorrectable ECC errors, is at or past
its slowdown temperature, or is lost (NVML cannot reach it any more, or it left the list). A
counter a device does not support (ECC on most consumer cards) is reported as null, not as a fault.
A node without NVIDIA's driver has no GPU: `discover` says so once and returns None.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import structlog

from sokovan.common.gpu import UNHEALTHY, DeviceInfo

log = structlog.get_logger(__name__)

LOST = "lost: NVML cannot reach it"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional(read: Callable[[], Any]) -> Any:
    """A reading, or None where the device does not support it."""
    import pynvml

    try:
        return read()
    except pynvml.NVMLError:
        return None


class NvmlDevices:
    """The node's NVIDIA devices, as found at start and sampled since."""

    real = True

    def __init__(self, found: list[DeviceInfo]) -> None:
        self._found = found

    @classmethod
    def discover(cls) -> NvmlDevices | None:
        """The devices NVML finds, or None (logged once) where there is no driver or no device."""
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:  # the library is absent, or the driver does not load
            log.info("gpu.none", reason=f"no NVIDIA driver: {type(exc).__name__}: {exc}")
            return None
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            capability = _optional(functools.partial(pynvml.nvmlDeviceGetCudaComputeCapability, handle))
            major, minor = capability or (0, 0)
            found.append(
                DeviceInfo(
                    id=f"cuda:{index}",
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    model=_text(pynvml.nvmlDeviceGetName(handle)),
                    memory=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                    compute_capability=f"{major}.{minor}" if major else None,
                )
            )
        if not found:
            log.info("gpu.none", reason="NVML finds no device")
            return None
        log.info("gpu.found", devices=[f"{d.id} {d.uuid} {d.model}" for d in found])
        return cls(found)

    @property
    def found(self) -> list[DeviceInfo]:
        return list(self._found)

    def sample(self) -> list[DeviceInfo]:
        import pynvml

        try:
            handles = {_text(pynvml.nvmlDeviceGetUUID(h)): h for h in _handles()}
        except pynvml.NVMLError:
            handles = {}
        return [_sampled(device, handles.get(device.uuid)) for device in self._found]


def _handles() -> list[Any]:
    import pynvml

    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]


def _sampled(device: DeviceInfo, handle: Any) -> DeviceInfo:
    import pynvml

    if handle is None:
        return device.model_copy(update={"status": UNHEALTHY, "reason": LOST})
    try:
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    except pynvml.NVMLError:
        return device.model_copy(update={"status": UNHEALTHY, "reason": LOST})
    temperature = _optional(lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
    slowdown = _optional(
        lambda: pynvml.nvmlDeviceGetTemperatureThreshold(handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    )
    utilization = _optional(lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    power = _optional(lambda: pynvml.nvmlDeviceGetPowerUsage(handle))
    ecc = _optional(
        lambda: pynvml.nvmlDeviceGetTotalEccErrors(
            handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
        )
    )
    reason = judge(ecc, temperature, slowdown)
    return device.model_copy(
        update={
            "status": UNHEALTHY if reason else "healthy",
            "reason": reason,
            "temperature": float(temperature) if temperature is not None else None,
            "utilization": float(utilization) if utilization is not None else None,
            "memory_used": int(memory.used),
            "power": power / 1000 if power is not None else None,
            "ecc_uncorrected": int(ecc) if ecc is not None else None,
        }
    )


def judge(ecc: int | None, temperature: float | None, slowdown: float | None) -> str | None:
    """Why a device with these readings is unhealthy (None: it is not)."""
    if ecc:
        return f"{ecc} uncorrectable ECC error(s)"
    if temperature is not None and slowdown and temperature >= slowdown:
        return f"at {temperature:g} °C, past its slowdown temperature ({slowdown:g} °C)"
    return None
