"""GPU pieces that need no GPU: hollow devices and their faults file, the slots an agent offers,
the choice of devices for placed kernels, NVML's health judgement, and the binding in a kernel's
environment and in the engine's create request."""

from __future__ import annotations

import uuid
from pathlib import Path

from sokovan.agent.container.config import ContainerOptions, KernelPlacement, create_request
from sokovan.agent.container.labels import KernelLabels
from sokovan.agent.gpu.hollow import FaultsFile, HollowDevices, read_faults
from sokovan.agent.gpu.nvml import NvmlDevices, judge
from sokovan.agent.gpu.source import offered_slots
from sokovan.agent.kernel_env import kernel_environ
from sokovan.common.gpu import DeviceInfo
from sokovan.common.rpc import KernelSpec
from sokovan.orchestrator.provisioner.devices import choose


def test_hollow_devices_and_their_faults(tmp_path: Path) -> None:
    faults = tmp_path / "faults"
    devices = HollowDevices("h-1", 4, faults)
    assert [d.uuid for d in devices.sample()] == [f"GPU-hollow-h-1-{i}" for i in range(4)]
    assert all(d.healthy and d.model == "hollow" for d in devices.sample())
    faults.write_text("h-1 2\nh-2 0\nnot a line\n")
    sampled = devices.sample()
    assert [d.status for d in sampled] == ["healthy", "healthy", "unhealthy", "healthy"]
    assert sampled[2].reason and sampled[2].ecc_uncorrected == 1
    faults.unlink()
    assert all(d.healthy for d in devices.sample())
    assert read_faults(None) == set() and FaultsFile(None).refresh() == set()


def test_an_agent_offers_its_healthy_devices_unless_its_slots_name_them() -> None:
    healthy = DeviceInfo(id="cuda:0", uuid="G0", model="m", memory=1)
    sick = DeviceInfo(id="cuda:1", uuid="G1", model="m", memory=1, status="unhealthy", reason="ecc")
    slots = {"cpu": "4", "mem": "8589934592"}
    assert offered_slots(slots, [healthy, sick], fixed=False) == {**slots, "cuda.device": "1"}
    assert offered_slots({**slots, "cuda.device": "2"}, [healthy, sick], fixed=True)["cuda.device"] == "2"
    assert offered_slots(slots, [], fixed=False) == slots


def _devices(agent: str, n: int, sick: tuple[int, ...] = ()) -> list[dict[str, object]]:
    return [
        {"id": f"cuda:{i}", "uuid": f"{agent}-{i}", "status": "unhealthy" if i in sick else "healthy"}
        for i in range(n)
    ]


def test_placed_kernels_get_distinct_healthy_free_devices_lowest_index_first() -> None:
    k1, k2, k3 = sorted(uuid.uuid4() for _ in range(3))
    devices = {"a": _devices("a", 8, sick=(1,)), "b": _devices("b", 2)}
    chosen = choose({k1: ("a", 2), k2: ("a", 4), k3: ("b", 1)}, devices, taken={"a-0"})
    assert chosen == {k1: ["a-2", "a-3"], k2: ["a-4", "a-5", "a-6", "a-7"], k3: ["b-0"]}
    assert choose({k1: ("c", 1)}, devices, set()) == {k1: []}  # an agent that reports none


def test_nvml_health_judgement() -> None:
    assert judge(0, 60.0, 90.0) is None
    assert judge(None, None, None) is None  # counters a card does not support are no fault
    assert "ECC" in (judge(2, 60.0, 90.0) or "")
    assert "slowdown" in (judge(0, 91.0, 90.0) or "")


def test_without_a_driver_nvml_finds_nothing() -> None:
    """On a machine without NVIDIA's driver (CI) discovery says so and gives no devices; on a GPU
    machine the `gpu` tests (tests/gpu) check what it finds against nvidia-smi."""
    found = NvmlDevices.discover()
    if found is not None:
        assert found.found and all(d.uuid.startswith("GPU-") for d in found.found)


def test_a_kernel_sees_exactly_its_devices() -> None:
    env = kernel_environ(
        directory="/w",
        image={},
        environ={"CUDA_VISIBLE_DEVICES": "all"},
        kernel_id="k",
        session_id="s",
        devices=["GPU-a", "GPU-b"],
    )
    assert env["CUDA_VISIBLE_DEVICES"] == env["NVIDIA_VISIBLE_DEVICES"] == "GPU-a,GPU-b"
    none = kernel_environ(directory="/w", image={}, environ={}, kernel_id="k", session_id="s")
    assert none["CUDA_VISIBLE_DEVICES"] == none["NVIDIA_VISIBLE_DEVICES"] == ""


def test_the_engine_is_asked_for_exactly_the_real_devices() -> None:
    spec = KernelSpec(kernel_id="k", session_id="s", image="img", devices=["GPU-a"])
    placement = KernelPlacement(image="img", user="1000:1000", network=None, port=None)
    labels = KernelLabels(agent_id="ag", kernel_id="k", session_id="s", image="img")
    real = create_request(spec, placement, labels, ContainerOptions(real_devices=True), limits=[])
    assert real["HostConfig"]["DeviceRequests"] == [
        {"Driver": "nvidia", "DeviceIDs": ["GPU-a"], "Capabilities": [["gpu"]]}
    ]
    assert "CUDA_VISIBLE_DEVICES=GPU-a" in real["Env"]
    hollow = create_request(spec, placement, labels, ContainerOptions(), limits=[])
    assert "DeviceRequests" not in hollow["HostConfig"] and "CUDA_VISIBLE_DEVICES=GPU-a" in hollow["Env"]
    cpu = create_request(
        spec.model_copy(update={"devices": []}),
        placement,
        labels,
        ContainerOptions(real_devices=True),
        limits=[],
    )
    assert "DeviceRequests" not in cpu["HostConfig"] and "CUDA_VISIBLE_DEVICES=" in cpu["Env"]
