"""What the process backend does around each kernel so that one session cannot reach another's, nor
the agent's secret: a user of its own, a private directory, limits, and the clean-up at its end.

As root (the way to run an agent that strangers' sessions share) each session's kernels run
under a uid of their own (`kernel_uids`), in a directory `<work_dir>/<kernel_id>` owned by that
uid with mode 0700, inside a work dir of mode 0711 (nobody lists the kernels); the wrapper, its
logs (0600) and its exit-code file stay the agent's (`kernel_wrapper`, `log_tail`). When a kernel
ends its directory goes back to the agent's user (so a later session given the same uid finds
nothing it can open), its cgroup is removed, and when it was the session's last kernel here the
uid is released and every process left under it killed.

Not as root, kernels run as the agent's own user: they cannot be kept from each other, and the
agent makes itself non-dumpable and reads its secret from a file (see `secret_file`) so that at
least the secret is out of their reach. `describe()` says which, for the agent's start log.

Limits (`kernel_limits`) come from the kernel's slots and the agent's caps: cgroup v2 where the
agent can write it, rlimits otherwise.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import structlog

from sokovan.agent.kernel_limits import DEFAULT_PIDS, Cgroups, limits_for, rlimits
from sokovan.agent.kernel_proc import DEFAULT_MAX_LOG_BYTES, Launch
from sokovan.agent.kernel_uids import DEFAULT_KERNEL_UIDS, KernelUids, UidRange, kill_uid
from sokovan.common.rpc import KernelSpec

log = structlog.get_logger(__name__)

DEFAULT_MAX_WORK_DIR_BYTES = 2**30
DEFAULT_KEEP_ENDED_KERNELS = 3600.0  # seconds an ended kernel's directory and logs are kept
KERNEL_UMASK = 0o077
DEFAULT_UID_RANGE = UidRange.parse(DEFAULT_KERNEL_UIDS)


@dataclass(frozen=True)
class IsolationOptions:
    """The agent's options for its kernels (`--kernel-uids`, `--max-log-bytes`, ...)."""

    kernel_uids: UidRange = DEFAULT_UID_RANGE
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES
    max_work_dir_bytes: int = DEFAULT_MAX_WORK_DIR_BYTES
    keep_ended_kernels: float = DEFAULT_KEEP_ENDED_KERNELS
    pids: int = DEFAULT_PIDS


class Isolation:
    """Per-kernel preparation and clean-up; `uids` is disabled unless the agent is root."""

    def __init__(self, options: IsolationOptions, cgroups: Cgroups | None, root: bool) -> None:
        self.options = options
        self.cgroups = cgroups
        self.uids = KernelUids(options.kernel_uids if root else None)
        self.limits_mechanism = "cgroup v2" if cgroups is not None else "rlimits"

    @classmethod
    def detect(cls, options: IsolationOptions) -> tuple[Isolation, str]:
        """The isolation this host allows; with why cgroups are (not) used, for the log."""
        cgroups, why = Cgroups.detect()
        return cls(options, cgroups, os.geteuid() == 0), why

    def describe(self) -> dict[str, object]:
        uids = self.uids.range
        return {
            "kernel_user": f"a uid per session from {uids.first}-{uids.last}"
            if uids is not None
            else "the agent's own user (the agent is not root: kernels are not isolated from each other)",
            "limits": self.limits_mechanism,
            "max_log_bytes": self.options.max_log_bytes,
            "max_work_dir_bytes": self.options.max_work_dir_bytes,
        }

    def prepare_work_dir(self, work_dir: Path) -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        if self.uids.enabled:
            os.chmod(work_dir, 0o711)  # kernels reach their own directory, list nobody's
            closed = [str(d) for d in work_dir.resolve().parents if not d.stat().st_mode & 0o001]
            if closed:
                log.warning(
                    "agent.work_dir_unreachable",
                    work_dir=str(work_dir),
                    closed=closed,
                    hint="kernels cannot reach their directories by absolute path: chmod o+x these",
                )

    def prepare(self, spec: KernelSpec, directory: Path) -> Launch:
        """Make the kernel's directory and cgroup; how the wrapper is to run it. ValueError when
        no uid is free, OSError when the directory or cgroup cannot be made."""
        uid = self.uids.acquire(spec.session_id)
        directory.mkdir(exist_ok=True)
        if not stat.S_ISDIR(os.lstat(directory).st_mode):
            raise OSError(f"{directory} is not a directory")
        if uid is not None:
            os.chown(directory, uid, uid, follow_symlinks=False)
        os.chmod(directory, 0o700)
        limits = limits_for(spec.slots, self.options.pids, self.options.max_work_dir_bytes)
        cgroup = self.cgroups.create(spec.kernel_id, limits) if self.cgroups is not None else None
        return Launch(
            uid=uid,
            rlimits=rlimits(limits, own_uid=uid is not None, cgroup=cgroup is not None),
            cgroup=str(cgroup) if cgroup is not None else None,
            umask=KERNEL_UMASK if uid is not None else None,
            max_log_bytes=self.options.max_log_bytes,
        )

    def ended(self, kernel_id: str, session_id: str, directory: Path, session_running: bool) -> None:
        """A kernel ended: take its directory back, drop its cgroup, and release the session's
        uid (killing what is left under it) unless another of its kernels still runs here."""
        if self.cgroups is not None:
            self.cgroups.remove(kernel_id)
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.lstat(directory).st_mode):
                if self.uids.enabled:
                    os.chown(directory, os.geteuid(), os.getegid(), follow_symlinks=False)
                    os.chmod(directory, 0o700)
                os.utime(directory)  # the start of its retention
        if session_running:
            return
        uid = self.uids.release(session_id)
        if uid is not None:
            killed = kill_uid(uid)
            if killed:
                log.info("kernel.uid_processes_killed", session_id=session_id, uid=uid, processes=killed)
