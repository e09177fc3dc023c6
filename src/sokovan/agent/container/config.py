"""The engine's create request for one kernel (pure: table-tested).

A kernel's container runs `/bin/sh -c <command>` (an idle loop for an interactive session without
one) under an init process that forwards signals and reaps orphans (`Init`), so SIGTERM reaches the
command and a `setsid` forker dies with the container's PID namespace. It gets:

- a non-root user: the session's uid from the agent's range, unless the image names a user other
  than root; no new privileges and Docker's default capabilities less those a kernel does not need;
- `/home/work` (its working directory) and `/tmp` as private tmpfs mounts, `/dev/shm` bounded;
  tmpfs pages are charged to the container's memory cgroup, so none of them outgrows its slot;
- the `mem` slot as the memory limit with no swap, the `cpu` slot as a CPU quota, a pids limit,
  and ulimits within the agent's own hard limits (the runtime refuses more, with EPERM);
- the environment `kernel_env` would give a process kernel (never the agent's), its cluster
  variables, and the session's `environ`;
- its session's network with its cluster hostname as alias, or none when told so;
- exactly the GPUs it was given (`CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES` and, where the
  agent's devices are real, a device request for their UUIDs), none for a kernel given none.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Any

from sokovan.agent.container.cluster_env import cluster_environ, hostname
from sokovan.agent.container.labels import KernelLabels
from sokovan.agent.kernel_limits import DEFAULT_PIDS, limits_for
from sokovan.common.gpu import visible_devices
from sokovan.common.rpc import KernelSpec

WORK_DIR = "/home/work"
IDLE_COMMAND = "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"
CPU_PERIOD = 100_000  # microseconds
# Docker's default capability set less what a kernel has no use for.
DROPPED_CAPABILITIES = (
    "AUDIT_WRITE",
    "MKNOD",
    "NET_RAW",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETPCAP",
    "SYS_CHROOT",
)
# Ulimits at most the agent's own hard limits and these (an engine may hold lower hard limits than
# the agent: Podman's service lowers its nproc to 32768); nproc is per uid, the pids limit per kernel.
NOFILE_CAP = 16_384


@dataclass(frozen=True)
class ContainerOptions:
    """The agent's caps for its containers."""

    pids: int = DEFAULT_PIDS
    work_bytes: int = 2**30  # /home/work
    tmp_bytes: int = 2**30  # /tmp
    shm_bytes: int = 64 * 2**20  # /dev/shm
    max_log_bytes: int = 16 * 2**20
    # The agent's GPUs are NVML's (not hollow): a kernel given devices gets exactly those from the
    # engine (a device request naming their UUIDs), besides CUDA_VISIBLE_DEVICES.
    real_devices: bool = False


@dataclass(frozen=True)
class KernelPlacement:
    """Where and as whom one kernel runs: decided by the backend before the create request."""

    image: str  # the resolved reference
    user: str  # "uid:gid" or the image's own user
    network: str | None  # the session's network; None: no network at all
    port: int | None  # the host port PORT is published on (inference)
    service_host: str = "127.0.0.1"


def hard_limit(which: int, cap: int) -> int:
    """The agent's own hard limit of `which`, capped (a container may not exceed it)."""
    _, hard = resource.getrlimit(which)
    return cap if hard == resource.RLIM_INFINITY else min(hard, cap)


def ulimits(pids: int = DEFAULT_PIDS) -> list[dict[str, Any]]:
    nofile = hard_limit(resource.RLIMIT_NOFILE, NOFILE_CAP)
    nproc = hard_limit(resource.RLIMIT_NPROC, pids)
    return [
        {"Name": "nofile", "Soft": nofile, "Hard": nofile},
        {"Name": "nproc", "Soft": nproc, "Hard": nproc},
    ]


def kernel_env(spec: KernelSpec, port: int | None) -> dict[str, str]:
    """Base, cluster variables, the session's environ, then what nothing overrides."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORK_DIR, "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
    env.update(cluster_environ(spec.cluster_size, spec.cluster_idx, spec.environ))
    env.update(spec.environ)
    env.update(SOKOVAN_KERNEL_ID=spec.kernel_id, SOKOVAN_SESSION_ID=spec.session_id)
    env.update(visible_devices(spec.devices))
    if port is not None:
        env["PORT"] = str(port)
    return env


def create_request(
    spec: KernelSpec,
    placement: KernelPlacement,
    labels: KernelLabels,
    options: ContainerOptions,
    limits: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The body of `POST /containers/create` for `spec`."""
    slots = limits_for(spec.slots, options.pids, None)
    host: dict[str, Any] = {
        "Init": True,
        "PidsLimit": options.pids,
        "Tmpfs": {
            WORK_DIR: f"rw,nosuid,nodev,size={options.work_bytes},mode=0700,U",
            "/tmp": f"rw,nosuid,nodev,size={options.tmp_bytes},mode=1777",
        },
        "ShmSize": options.shm_bytes,
        "SecurityOpt": ["no-new-privileges"],
        "CapDrop": list(DROPPED_CAPABILITIES),
        "Ulimits": limits if limits is not None else ulimits(options.pids),
        "LogConfig": {"Type": "", "Config": {"max-size": str(options.max_log_bytes)}},
        "NetworkMode": placement.network or "none",
    }
    if slots.mem is not None:
        host["Memory"] = slots.mem
        host["MemorySwap"] = slots.mem  # memory + swap = memory: no swap
    if slots.cpu is not None:
        host["CpuPeriod"] = CPU_PERIOD
        host["CpuQuota"] = max(1000, int(slots.cpu * CPU_PERIOD))
    if spec.devices and options.real_devices:
        host["DeviceRequests"] = [
            {"Driver": "nvidia", "DeviceIDs": list(spec.devices), "Capabilities": [["gpu"]]}
        ]
    env = kernel_env(spec, placement.port)
    body: dict[str, Any] = {
        "Image": placement.image,
        "Entrypoint": ["/bin/sh", "-c"],
        "Cmd": [spec.command or IDLE_COMMAND],
        "User": placement.user,
        "WorkingDir": WORK_DIR,
        "Hostname": hostname(spec.cluster_idx),
        "Env": [f"{key}={value}" for key, value in env.items()],
        "Labels": labels.to_labels(),
        "HostConfig": host,
    }
    if placement.port is not None:
        # the same number inside and out: the server binds $PORT, the agent publishes it as is
        inside = f"{placement.port}/tcp"
        body["ExposedPorts"] = {inside: {}}
        host["PortBindings"] = {inside: [{"HostIp": placement.service_host, "HostPort": str(placement.port)}]}
    if placement.network is not None:
        body["NetworkingConfig"] = {
            "EndpointsConfig": {placement.network: {"Aliases": [hostname(spec.cluster_idx)]}}
        }
    return body
