"""The process backend: every kernel is an OS process group.

A kernel runs `/bin/sh -c <command>` in `<work_dir>/<kernel_id>/`, in a session (and process
group) of its own, with stdout/stderr in `stdout.log`/`stderr.log` there; the files outlive the
process so that `logs` works after the end. One task per kernel awaits its exit and reports it.
A kernel of an `inference` session also gets a TCP port of its own in `PORT`, reserved until it
ends, and reports `http://<host>:<port>` as its service address (see `service_ports`).

Events go through `emit`, a non-blocking callback; the daemon publishes them in order.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from pydantic import BaseModel

from sokovan.agent.events import Ended, EndReason, destroyed_again, image_unavailable, kernel_ids
from sokovan.agent.images import ImageCatalog
from sokovan.agent.reconcile import reconcile_event
from sokovan.agent.service_ports import INFERENCE, PortAllocator
from sokovan.common.events import KernelCreationFailed, KernelRunning, KernelTerminated
from sokovan.common.rpc import KernelSpec, LogsResponse, ReconcileItem

log = structlog.get_logger(__name__)

Emit = Callable[[BaseModel], None]

IDLE_COMMAND = "exec sleep 2147483647"
LOG_TAIL_BYTES = 64 * 1024
MAX_REMEMBERED = 10_000  # ended kernels whose exit code and reason are kept (destroy, reconcile)
_KERNEL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass
class _Kernel:
    kernel_id: str
    session_id: str
    proc: asyncio.subprocess.Process
    oom_mark: int | None
    port: int | None = None
    service_addr: str | None = None
    destroy_requested: bool = False
    killer: asyncio.Task[None] | None = None
    watcher: asyncio.Task[None] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


def valid_kernel_id(kernel_id: str) -> bool:
    """Kernel ids name directories, so only plain names are accepted."""
    return bool(_KERNEL_ID_RE.match(kernel_id))


def oom_kill_count() -> int | None:
    """How many processes the kernel's OOM killer has killed (host-wide and in our cgroup).

    None when neither counter can be read; then an unrequested SIGKILL is not called OOM.
    """
    total: int | None = None
    for path, prefix in ((Path("/proc/vmstat"), "oom_kill "), (_cgroup_events(), "oom_kill ")):
        try:
            for line in path.read_text().splitlines():
                if line.startswith(prefix):
                    total = (total or 0) + int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total


def _cgroup_events() -> Path:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return Path("/sys/fs/cgroup") / line[3:].lstrip("/") / "memory.events"
    except OSError:
        pass
    return Path("/nonexistent")


class ProcessBackend:
    """Starts, watches and stops kernel processes of one agent."""

    def __init__(
        self,
        agent_id: str,
        work_dir: Path,
        catalog: ImageCatalog,
        emit: Emit,
        kill_grace: float = 5.0,
        service_host: str = "127.0.0.1",
    ) -> None:
        self.agent_id = agent_id
        self.work_dir = work_dir
        self.catalog = catalog
        self.kill_grace = kill_grace
        self.service_host = service_host
        self.ports = PortAllocator()
        self._emit = emit
        self._live: dict[str, _Kernel] = {}
        self._ended: OrderedDict[str, Ended] = OrderedDict()
        # Spawning and looking up are serialized so that a destroy sent right after a create
        # always finds the kernel, and a repeated create never starts a second process.
        self._lock = asyncio.Lock()

    def running_kernels(self) -> list[str]:
        return sorted(self._live)

    async def create(self, spec: KernelSpec) -> None:
        async with self._lock:
            existing = self._live.get(spec.kernel_id)
            if existing is not None:
                self._emit(self._running_event(existing))
                return
            try:
                kernel = await self._spawn(spec)
            except (OSError, ValueError) as exc:
                message = str(exc) if isinstance(exc, ValueError) else f"cannot start the kernel: {exc}"
                log.warning("kernel.creation_failed", kernel_id=spec.kernel_id, error=message)
                self._emit(KernelCreationFailed(**kernel_ids(self.agent_id, spec), message=message))
                return
            self._live[spec.kernel_id] = kernel
            self._ended.pop(spec.kernel_id, None)
            kernel.watcher = asyncio.create_task(self._watch(kernel), name=f"kernel-{spec.kernel_id}")
            log.info("kernel.started", kernel_id=spec.kernel_id, pid=kernel.proc.pid)
            self._emit(self._running_event(kernel))

    async def _spawn(self, spec: KernelSpec) -> _Kernel:
        if not valid_kernel_id(spec.kernel_id):
            raise ValueError(f"invalid kernel id {spec.kernel_id!r}")
        image = self.catalog.get(spec.image)
        if image is None:
            raise ValueError(image_unavailable(spec.image, self.agent_id))
        directory = self.work_dir / spec.kernel_id
        directory.mkdir(parents=True, exist_ok=True)
        env = {"HOME": str(directory), **image.environment(), **spec.environ}
        env.update(SOKOVAN_KERNEL_ID=spec.kernel_id, SOKOVAN_SESSION_ID=spec.session_id)
        port = self.ports.allocate() if spec.session_type == INFERENCE else None
        if port is not None:
            env["PORT"] = str(port)  # the agent's port wins over one in the session's environ
        mark = oom_kill_count()
        try:
            proc = await _start(spec.command, directory, env)
        except BaseException:
            self.ports.release(port)
            raise
        service_addr = f"http://{self.service_host}:{port}" if port is not None else None
        return _Kernel(spec.kernel_id, spec.session_id, proc, mark, port, service_addr)

    def _running_event(self, kernel: _Kernel) -> KernelRunning:
        return KernelRunning(
            **kernel_ids(self.agent_id, kernel), pid=kernel.proc.pid, service_addr=kernel.service_addr
        )

    async def _watch(self, kernel: _Kernel) -> None:
        returncode = await kernel.proc.wait()
        _killpg(kernel.proc.pid, signal.SIGKILL)  # what the main process left behind
        exit_code, reason = self._classify(kernel, returncode)
        self._live.pop(kernel.kernel_id, None)
        self.ports.release(kernel.port)
        self._ended[kernel.kernel_id] = Ended(kernel.session_id, exit_code, reason)
        while len(self._ended) > MAX_REMEMBERED:
            self._ended.popitem(last=False)
        log.info("kernel.terminated", kernel_id=kernel.kernel_id, exit_code=exit_code, reason=reason)
        self._emit(KernelTerminated(**kernel_ids(self.agent_id, kernel), exit_code=exit_code, reason=reason))
        kernel.done.set()

    @staticmethod
    def _classify(kernel: _Kernel, returncode: int) -> tuple[int, EndReason]:
        signum = -returncode if returncode < 0 else None
        exit_code = 128 + signum if signum is not None else returncode
        if kernel.destroy_requested:
            return exit_code, "destroyed"
        # A SIGKILL of the shell or (reported by the shell as 137) of its child, while the OOM
        # killer's counters went up, is called OOM; without readable counters it is "exited".
        if exit_code == 128 + signal.SIGKILL and kernel.oom_mark is not None:
            now = oom_kill_count()
            if now is not None and now > kernel.oom_mark:
                return exit_code, "oom"
        return exit_code, "exited"

    async def destroy(self, kernel_id: str, forced: bool = False) -> None:
        """Stop a kernel; its KernelTerminated follows when the process is gone."""
        async with self._lock:
            kernel = self._live.get(kernel_id)
        if kernel is None:
            self._emit(destroyed_again(self.agent_id, kernel_id, self._ended.get(kernel_id)))
            return
        kernel.destroy_requested = True
        if forced:
            _killpg(kernel.proc.pid, signal.SIGKILL)
        if kernel.killer is None:
            kernel.killer = asyncio.create_task(self._kill(kernel, forced), name=f"kill-{kernel_id}")

    async def _kill(self, kernel: _Kernel, forced: bool) -> None:
        if not forced:
            _killpg(kernel.proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(kernel.done.wait(), self.kill_grace)
                return
            except TimeoutError:
                log.info("kernel.kill_after_grace", kernel_id=kernel.kernel_id, grace=self.kill_grace)
        _killpg(kernel.proc.pid, signal.SIGKILL)
        await kernel.done.wait()

    async def reconcile(self, item: ReconcileItem) -> None:
        """Re-publish the one event that tells `item`'s current state (`reconcile_event`);
        starts and stops nothing."""
        async with self._lock:  # a create in progress is seen as done
            kernel = self._live.get(item.kernel_id)
        ended = self._ended.get(item.kernel_id)
        self._emit(
            reconcile_event(
                self.agent_id,
                item,
                live=kernel is not None,
                pid=kernel.proc.pid if kernel is not None else None,
                ended=(ended.exit_code, ended.reason) if ended is not None else None,
                image_available=item.image in self.catalog,
                service_addr=kernel.service_addr if kernel is not None else None,
            )
        )

    async def shutdown(self) -> None:
        """Destroy every live kernel and wait until all of them have been reported."""
        kernels = list(self._live.values())
        for kernel in kernels:
            await self.destroy(kernel.kernel_id)
        await asyncio.gather(*(k.done.wait() for k in kernels))

    def logs(self, kernel_id: str) -> LogsResponse | None:
        """The tail of a kernel's output, or None when this agent never ran it."""
        if not valid_kernel_id(kernel_id):
            return None
        directory = self.work_dir / kernel_id
        if kernel_id not in self._live and not directory.is_dir():
            return None
        return LogsResponse(
            kernel_id=kernel_id,
            stdout=_tail(directory / "stdout.log"),
            stderr=_tail(directory / "stderr.log"),
        )


async def _start(command: str | None, directory: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    """`/bin/sh -c <command>` (or the idle command) in `directory`, output to its log files."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    out = os.open(directory / "stdout.log", flags, 0o644)
    try:
        err = os.open(directory / "stderr.log", flags, 0o644)
        try:
            return await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                command if command is not None else IDLE_COMMAND,
                cwd=directory,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        finally:
            os.close(err)
    finally:
        os.close(out)


def install_child_watcher() -> None:
    """Use a pidfd child watcher where Python 3.11 would start one thread per kernel.

    Python 3.12+ picks pidfds by itself. Call this once, before the event loop starts.
    """
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # a kernel without pidfd support: keep the threaded watcher
        return
    asyncio.set_child_watcher(asyncio.PidfdChildWatcher())


def _killpg(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read(limit)
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")
