"""How a kernel's slots and the agent's caps become limits the OS enforces.

Two mechanisms; the agent picks one at start (`Cgroups.detect`) and logs which:

- cgroup v2, where the host lets the agent write it: a cgroup per kernel,
  `<agent's cgroup>/sokovan/<kernel_id>`, with `memory.max` (the mem slot), `cpu.max` (the cpu
  slot as a quota per 100 ms period), `pids.max` and `memory.swap.max` 0; the wrapper joins it
  before starting the program, and the agent removes it when the kernel ends. It needs a cgroup2
  mount whose agent cgroup offers the memory, cpu and pids controllers and lets the agent enable
  them for a child.
- rlimits otherwise (`rlimits`): RLIMIT_AS from the mem slot with headroom (an address space is
  not memory use: a runtime reserves far more than it touches), RLIMIT_NPROC only when the kernel
  has a uid of its own (the limit counts every process of the uid), never a CPU rate (rlimits
  have none: the cpu slot is then not enforced).

Both add RLIMIT_FSIZE (no file above the work-dir cap) and RLIMIT_CORE 0 (no core dumps filling
the disk). The rules are pure functions with their own table tests; only `Cgroups` touches files.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from sokovan.common.slots import SlotError, parse_amount

AS_HEADROOM = 512 * 2**20  # RLIMIT_AS = 2 x mem + this
DEFAULT_PIDS = 1024  # processes (threads) per kernel (cgroup) or per session uid (rlimit)
CPU_PERIOD = 100_000  # microseconds
CONTROLLERS = ("memory", "cpu", "pids")


@dataclass(frozen=True)
class KernelLimits:
    mem: int | None = None  # bytes
    cpu: Decimal | None = None  # cores
    pids: int = DEFAULT_PIDS
    file_size: int | None = None  # bytes, per file


def limits_for(slots: Mapping[str, str], pids: int, file_size: int | None) -> KernelLimits:
    """The limits of a kernel with `slots` (a missing, zero or bad amount: no limit for it)."""
    return KernelLimits(
        mem=int(_amount("mem", slots)) or None,
        cpu=_amount("cpu", slots) or None,
        pids=pids,
        file_size=file_size,
    )


def _amount(name: str, slots: Mapping[str, str]) -> Decimal:
    try:
        return parse_amount(name, slots[name]) if name in slots else Decimal(0)
    except SlotError:
        return Decimal(0)


def rlimits(limits: KernelLimits, *, own_uid: bool, cgroup: bool) -> dict[str, int]:
    """The resource limits the program gets (names of the `resource` module)."""
    out = {"RLIMIT_CORE": 0}
    if limits.file_size is not None:
        out["RLIMIT_FSIZE"] = limits.file_size
    if not cgroup and limits.mem is not None:
        out["RLIMIT_AS"] = 2 * limits.mem + AS_HEADROOM
    if not cgroup and own_uid:
        out["RLIMIT_NPROC"] = limits.pids
    return out


def cgroup_files(limits: KernelLimits) -> dict[str, str]:
    """What to write into a kernel's cgroup: file name → content."""
    files = {"pids.max": str(limits.pids)}
    if limits.mem is not None:
        files["memory.max"] = str(limits.mem)
        files["memory.swap.max"] = "0"
    if limits.cpu is not None:
        quota = max(int(limits.cpu * CPU_PERIOD), 1000)
        files["cpu.max"] = f"{quota} {CPU_PERIOD}"
    return files


def cgroup2_dir(mounts: str, own_cgroup: str) -> Path | None:
    """The agent's own cgroup v2 directory, from /proc/self/mounts and /proc/self/cgroup."""
    mount = next((line.split()[1] for line in mounts.splitlines() if line.split()[2:3] == ["cgroup2"]), None)
    path = next((line[3:] for line in own_cgroup.splitlines() if line.startswith("0::")), None)
    if mount is None or path is None:
        return None
    return Path(mount) / path.lstrip("/")


class Cgroups:
    """Kernels' cgroups under `<base>/sokovan`, `base` the agent's own cgroup."""

    def __init__(self, parent: Path) -> None:
        self.parent = parent

    @classmethod
    def detect(cls) -> tuple[Cgroups | None, str]:
        """The agent's cgroups when the host lets it have them, else None; and why, for the log."""
        try:
            base = cgroup2_dir(Path("/proc/self/mounts").read_text(), Path("/proc/self/cgroup").read_text())
        except OSError as exc:
            return None, f"cannot read the process's cgroup: {exc}"
        if base is None:
            return None, "no cgroup v2 mount"
        try:
            offered = (base / "cgroup.controllers").read_text().split()
        except OSError as exc:
            return None, f"cannot read {base}/cgroup.controllers: {exc.strerror}"
        missing = [c for c in CONTROLLERS if c not in offered]
        if missing:
            return None, f"cgroup v2 at {base} lacks the {', '.join(missing)} controller(s)"
        parent = base / "sokovan"
        enable = " ".join(f"+{c}" for c in CONTROLLERS)
        try:
            (base / "cgroup.subtree_control").write_text(enable)
            parent.mkdir(exist_ok=True)
            (parent / "cgroup.subtree_control").write_text(enable)
        except OSError as exc:
            return None, f"cannot delegate the controllers below {base}: {exc.strerror or exc}"
        return cls(parent), f"cgroup v2 at {parent}"

    def create(self, kernel_id: str, limits: KernelLimits) -> Path:
        """The kernel's cgroup with its limits (OSError when it cannot be made)."""
        directory = self.parent / kernel_id
        directory.mkdir(exist_ok=True)
        for name, content in cgroup_files(limits).items():
            with contextlib.suppress(FileNotFoundError):  # memory.swap.max without swap accounting
                (directory / name).write_text(content)
        return directory

    def remove(self, kernel_id: str) -> None:
        """Kill what is left in the kernel's cgroup and remove it."""
        directory = self.parent / kernel_id
        with contextlib.suppress(OSError):
            (directory / "cgroup.kill").write_text("1")
        with contextlib.suppress(OSError):
            os.rmdir(directory)
