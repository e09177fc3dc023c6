"""On a machine with an NVIDIA GPU (NVML finds a device): the agent's real GPU code against the
driver. Skipped, saying why, everywhere else (CI has no GPU).

- Discovery matches `nvidia-smi`: index, UUID, model and memory of every device.
- The heartbeat's health readings match NVML's own (temperature within a few degrees).
- Binding: a process given one device's UUID in the environment the agent builds sees exactly one
  device and computes on it; one given none sees none (PyTorch or CuPy, whichever is installed).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from sokovan.agent.gpu.nvml import NvmlDevices
from sokovan.agent.kernel_env import kernel_environ

pytestmark = pytest.mark.gpu
FOUND = NvmlDevices.discover()
if FOUND is None:
    pytest.skip(
        "no NVIDIA GPU here: NVML finds no device (the agent would report none)", allow_module_level=True
    )

PROBE = """
try:
    import torch
    n = torch.cuda.device_count()
    ok = n and float((torch.ones(1024, device="cuda") * 2).sum()) == 2048.0
except ImportError:
    import cupy
    n = cupy.cuda.runtime.getDeviceCount()
    ok = n and float((cupy.ones(1024) * 2).sum()) == 2048.0
print(n, bool(ok))
"""


def _framework() -> bool:
    for name in ("torch", "cupy"):
        done = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, check=False)
        if done.returncode == 0:
            return True
    return False


def test_discovery_matches_nvidia_smi() -> None:
    assert FOUND is not None and shutil.which("nvidia-smi")
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [[p.strip() for p in line.split(",")] for line in out.strip().splitlines()]
    assert [(d.id, d.uuid, d.model) for d in FOUND.found] == [(f"cuda:{r[0]}", r[1], r[2]) for r in rows]
    for device, row in zip(FOUND.found, rows, strict=True):
        assert abs(device.memory / 2**20 - int(row[3])) <= 1


def test_health_readings_match_nvml() -> None:
    import pynvml

    assert FOUND is not None
    for device in FOUND.sample():
        handle = pynvml.nvmlDeviceGetHandleByUUID(device.uuid)
        temperature = pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
        assert device.temperature is not None and abs(device.temperature - temperature) <= 5
        assert device.memory_used is not None and 0 <= device.memory_used <= device.memory
        assert device.utilization is not None and 0 <= device.utilization <= 100
        assert device.status == "healthy", device.reason


@pytest.mark.parametrize("given", [1, 0])
def test_a_kernel_sees_exactly_the_devices_it_was_given(given: int) -> None:
    if not _framework():
        pytest.skip("neither PyTorch nor CuPy is installed here")
    assert FOUND is not None
    devices = [d.uuid for d in FOUND.found[:given]]
    env = kernel_environ(
        directory="/tmp", image={}, environ={}, kernel_id="k", session_id="s", devices=devices
    )
    env["PATH"] = f"{shutil.os.path.dirname(sys.executable)}:{env['PATH']}"  # type: ignore[attr-defined]
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=False)
    if given:
        assert done.stdout.split() == ["1", "True"], done.stdout + done.stderr
    else:
        assert done.stdout.split()[:1] == ["0"] or "no CUDA" in done.stderr, done.stdout + done.stderr
