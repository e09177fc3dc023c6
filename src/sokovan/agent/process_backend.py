"""The process backend: every kernel is an OS process group, and it outlives an agent restart.

A kernel runs `/bin/sh -c <command>` in `<work_dir>/<kernel_id>/`, under the exit-code wrapper
(`kernel_proc`), in a session (and process group) of its own, with stdout/stderr in
`stdout.log`/`stderr.log` there (capped, see `kernel_wrapper`); the files outlive the process so
that `logs` works after the end, for `keep_ended_kernels` seconds (`sweep`). Its environment is
`kernel_env`'s, never the agent's; its user, directory rights and limits are `isolation`'s. A
kernel whose directory grows past the work-dir cap is ended (`police`) like one that wrote a file
past RLIMIT_FSIZE: with SIGXFSZ, so exit code 153, and a line in its stderr.log saying why.
A destroy sends the kernel's process group SIGTERM and SIGKILL after the grace (the request's,
else `kill_grace`), at once when forced; what the kernel writes and the code it exits with within
its grace are kept, and a repeated destroy within the grace neither restarts nor shortens it.
One task per kernel awaits its exit and reports it. A kernel of an `inference` session also gets a
TCP port of its own in `PORT`, reserved until it ends, and reports `http://<host>:<port>` as its
service address (see `service_ports`).

Every start and end rewrites the agent's state file (`state_file`). `detach()` stops watching and
leaves the kernels running (an agent stopped with SIGTERM); `recover()`, at the next start, watches
again the ones that still run and reports the ones that ended meanwhile, with the code their
wrapper recorded ("lost" when there is none).

Events go through `emit`, a non-blocking callback; the daemon publishes them in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import OrderedDict
from pathlib import Path

import structlog
from pydantic import BaseModel

from sokovan.agent import kernel_proc
from sokovan.agent.events import (
    Emit,
    Ended,
    EndReason,
    destroyed_again,
    image_unavailable,
    kernel_ids,
    stop_within_grace,
    valid_kernel_id,
)
from sokovan.agent.housekeeping import dir_size, expired_kernel_dirs, remove_tree
from sokovan.agent.images import ImageCatalog
from sokovan.agent.isolation import Isolation, IsolationOptions
from sokovan.agent.kernel_env import kernel_environ
from sokovan.agent.kernel_wrapper import exit_code as exit_code_of
from sokovan.agent.log_tail import LOG_TAIL_BYTES, note_in_log, tail
from sokovan.agent.oom import SIGKILL_EXIT, oom_kill_count
from sokovan.agent.process_kernel import ProcessKernel, end_reason
from sokovan.agent.reconcile import reconcile_event
from sokovan.agent.service_ports import INFERENCE, PortAllocator
from sokovan.agent.state_file import KernelRecord, StateFile
from sokovan.common.events import (
    KernelCreationFailed,
    KernelImagePullFailed,
    KernelPrepared,
    KernelPulling,
    KernelRunning,
    KernelTerminated,
)
from sokovan.common.rpc import KernelSpec, LogsResponse, ReconcileItem

log = structlog.get_logger(__name__)

MAX_REMEMBERED = 10_000  # ended kernels whose exit code and reason are kept (destroy, reconcile)


class ProcessBackend:
    """Starts, watches and stops kernel processes of one agent."""

    name = "process"
    registries: list[str] = []  # a process agent pulls nothing

    def __init__(
        self,
        agent_id: str,
        work_dir: Path,
        catalog: ImageCatalog,
        emit: Emit,
        kill_grace: float = 5.0,
        service_host: str = "127.0.0.1",
        state: StateFile | None = None,
        isolation: Isolation | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.work_dir = work_dir
        self.catalog = catalog
        self.kill_grace = kill_grace
        self.service_host = service_host
        self.ports = PortAllocator()
        self.state = state
        self.isolation = isolation or Isolation(IsolationOptions(), None, root=os.geteuid() == 0)
        self._emit = emit
        self._live: dict[str, ProcessKernel] = {}
        self._ended: OrderedDict[str, Ended] = OrderedDict()
        # Spawning and looking up are serialized so that a destroy sent right after a create
        # always finds the kernel, and a repeated create never starts a second process.
        self._lock = asyncio.Lock()

    def running_kernels(self) -> list[str]:
        return sorted(self._live)

    def images_offered(self) -> list[str]:
        return self.catalog.names()

    def describe(self) -> dict[str, object]:
        return {"backend": self.name, **self.isolation.describe()}

    async def start(self) -> list[BaseModel]:
        """`recover()`, as the daemon's start calls every backend."""
        return self.recover()

    async def read_logs(self, kernel_id: str) -> LogsResponse | None:
        return self.logs(kernel_id)

    async def check_and_pull(self, spec: KernelSpec) -> None:
        """A catalog image is there or not: PREPARED at once, or IMAGE_PULL_FAILURE."""
        ids = kernel_ids(self.agent_id, spec)
        self._emit(KernelPulling(**ids))
        if spec.image in self.catalog:
            self._emit(KernelPrepared(**ids))
        else:
            self._emit(KernelImagePullFailed(**ids, message=image_unavailable(spec.image, self.agent_id)))

    def _save(self) -> None:
        if self.state is not None:
            self.state.save([kernel.record for kernel in self._live.values()])

    async def create(self, spec: KernelSpec) -> None:
        async with self._lock:
            existing = self._live.get(spec.kernel_id)
            if existing is not None:
                self._emit(self._running_event(existing))
                return
            try:
                kernel = self._spawn(spec)
            except (OSError, ValueError) as exc:
                message = str(exc) if isinstance(exc, ValueError) else f"cannot start the kernel: {exc}"
                log.warning(
                    "kernel.creation_failed",
                    kernel_id=spec.kernel_id,
                    session_id=spec.session_id,
                    error=message,
                )
                self._emit(KernelCreationFailed(**kernel_ids(self.agent_id, spec), message=message))
                return
            self._ended.pop(spec.kernel_id, None)
            self._watch(kernel)
            self._save()
            log.info("kernel.started", kernel_id=spec.kernel_id, session_id=spec.session_id, pid=kernel.pid)
            self._emit(self._running_event(kernel))

    def _spawn(self, spec: KernelSpec) -> ProcessKernel:
        if not valid_kernel_id(spec.kernel_id):
            raise ValueError(f"invalid kernel id {spec.kernel_id!r}")
        image = self.catalog.get(spec.image)
        if image is None:
            raise ValueError(image_unavailable(spec.image, self.agent_id))
        directory = self.work_dir / spec.kernel_id
        port = self.ports.allocate() if spec.session_type == INFERENCE else None
        env = kernel_environ(
            directory=str(directory),
            image=image.environment(),
            environ=spec.environ,
            kernel_id=spec.kernel_id,
            session_id=spec.session_id,
            port=port,
            devices=spec.devices,
        )
        mark = oom_kill_count()
        try:
            launch = self.isolation.prepare(spec, directory)
            proc = kernel_proc.spawn(spec.command, directory, env, launch)
        except BaseException:
            self.ports.release(port)
            self.isolation.ended(
                spec.kernel_id, spec.session_id, directory, self._has_session(spec.session_id)
            )
            raise
        record = KernelRecord(
            kernel_id=spec.kernel_id,
            session_id=spec.session_id,
            pid=proc.pid,
            pid_start=kernel_proc.start_time(proc.pid),
            directory=str(directory),
            port=port,
            service_addr=f"http://{self.service_host}:{port}" if port is not None else None,
            oom_mark=mark,
            uid=launch.uid,
        )
        return ProcessKernel(record, proc)

    def _has_session(self, session_id: str) -> bool:
        """Whether a kernel of `session_id` runs here."""
        return any(kernel.session_id == session_id for kernel in self._live.values())

    def _watch(self, kernel: ProcessKernel) -> None:
        """Count `kernel` as live and watch it until it ends."""
        self._live[kernel.kernel_id] = kernel
        kernel.watcher = asyncio.create_task(self._await_end(kernel), name=f"kernel-{kernel.kernel_id}")

    def _running_event(self, kernel: ProcessKernel) -> KernelRunning:
        return KernelRunning(
            **kernel_ids(self.agent_id, kernel), pid=kernel.pid, service_addr=kernel.record.service_addr
        )

    async def _await_end(self, kernel: ProcessKernel) -> None:
        returncode = await kernel_proc.wait_ended(kernel.pid, kernel.record.pid_start, kernel.proc)
        kernel_proc.killpg(kernel.pid, signal.SIGKILL)  # what the main process left behind
        exit_code = kernel_proc.read_exit_code(Path(kernel.record.directory))
        if exit_code is None and returncode is not None:
            exit_code = exit_code_of(returncode)  # the wrapper itself was killed
        if exit_code is None and kernel.killed:
            exit_code = SIGKILL_EXIT  # a kernel of an earlier run, killed by this one
        reason = end_reason(exit_code, kernel.record.oom_mark, kernel.destroy_requested)
        terminated = self._end(kernel.record, exit_code, reason)
        self._save()
        self._emit(terminated)
        kernel.done.set()

    def _end(self, record: KernelRecord, exit_code: int | None, reason: EndReason) -> KernelTerminated:
        """Forget a kernel that ended (remembering how) and free its port; the event to report."""
        self._live.pop(record.kernel_id, None)
        self.ports.release(record.port)
        self.isolation.ended(
            record.kernel_id, record.session_id, Path(record.directory), self._has_session(record.session_id)
        )
        self._ended[record.kernel_id] = Ended(record.session_id, exit_code, reason)
        while len(self._ended) > MAX_REMEMBERED:
            self._ended.popitem(last=False)
        ids = {"kernel_id": record.kernel_id, "session_id": record.session_id}
        log.info("kernel.terminated", **ids, exit_code=exit_code, reason=reason)
        return KernelTerminated(**kernel_ids(self.agent_id, record), exit_code=exit_code, reason=reason)

    async def destroy(self, kernel_id: str, forced: bool = False, grace: float | None = None) -> None:
        """Stop a kernel: SIGTERM, SIGKILL after `grace` seconds (None: the agent's `kill_grace`),
        or SIGKILL at once when `forced`; its KernelTerminated follows when the process is gone.

        A kernel within its grace keeps it: a second destroy neither restarts nor shortens it
        (what it wrote and the code it exits with meanwhile are kept), unless it is `forced`."""
        async with self._lock:
            kernel = self._live.get(kernel_id)
        if kernel is None:
            self._emit(destroyed_again(self.agent_id, kernel_id, self._ended.get(kernel_id)))
            return
        kernel.destroy_requested = True
        if forced:
            self._sigkill(kernel)
        if kernel.killer is None:
            wait = self.kill_grace if grace is None else grace
            kernel.killer = asyncio.create_task(self._kill(kernel, forced, wait), name=f"kill-{kernel_id}")

    def _sigkill(self, kernel: ProcessKernel) -> None:
        kernel.killed = True
        kernel_proc.killpg(kernel.pid, signal.SIGKILL)

    async def _kill(
        self, kernel: ProcessKernel, forced: bool, grace: float, grace_first: bool = False
    ) -> None:
        """SIGTERM (unless `forced`), SIGKILL after `grace` seconds; `grace_first`: a signal was
        sent already, SIGKILL only after the grace."""
        if grace_first:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(kernel.done.wait(), grace)
            if kernel.done.is_set():
                return

        async def term() -> None:
            kernel_proc.killpg(kernel.pid, signal.SIGTERM)

        async def kill() -> None:
            self._sigkill(kernel)

        await stop_within_grace(
            kernel.done, term, kill, forced=forced, grace=grace, kernel_id=kernel.kernel_id
        )

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
                pid=kernel.pid if kernel is not None else None,
                ended=(ended.exit_code, ended.reason) if ended is not None else None,
                image_available=item.image in self.catalog,
                service_addr=kernel.record.service_addr if kernel is not None else None,
            )
        )

    async def shutdown(self) -> None:
        """Destroy every live kernel and wait until all of them have been reported."""
        kernels = list(self._live.values())
        for kernel in kernels:
            await self.destroy(kernel.kernel_id)
        await asyncio.gather(*(k.done.wait() for k in kernels))

    async def detach(self) -> list[str]:
        """Stop watching (and killing) the kernels, record them in the state file, leave them
        running; the ids of the kernels left behind."""
        kernels = list(self._live.values())
        tasks = [t for k in kernels for t in (k.watcher, k.killer) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._save()
        return sorted(k.kernel_id for k in kernels)

    def recover(self) -> list[BaseModel]:
        """Take over the kernels the state file names: watch the ones still running, and end the
        ones that died meanwhile. The events to publish once the agent has registered: KernelRunning
        of each kernel taken over (a no-op for the manager unless it missed the first one), and
        KernelTerminated of each that ended."""
        if self.state is None:
            return []
        found: list[BaseModel] = []
        records = [
            r for r in self.state.load() if r.kernel_id not in self._live and valid_kernel_id(r.kernel_id)
        ]
        alive = [r for r in records if kernel_proc.alive(r.pid, r.pid_start)]
        for record in alive:  # first: a session's uid is not released while a kernel of it runs
            kernel = ProcessKernel(record)
            self.ports.reserve(record.port)
            self.isolation.uids.restore(record.session_id, record.uid)
            self._watch(kernel)
            found.append(self._running_event(kernel))
            log.info("kernel.reattached", kernel_id=record.kernel_id, pid=record.pid)
        for record in records:
            if record in alive:
                continue
            exit_code = kernel_proc.read_exit_code(Path(record.directory))
            reason = end_reason(exit_code, record.oom_mark, destroy_requested=False)
            found.append(self._end(record, exit_code, reason))
        self._save()
        return found

    def logs(self, kernel_id: str) -> LogsResponse | None:
        """The tail of a kernel's output, or None when this agent never ran it."""
        if not valid_kernel_id(kernel_id):
            return None
        kernel = self._live.get(kernel_id)
        directory = Path(kernel.record.directory) if kernel is not None else self.work_dir / kernel_id
        if kernel is None and not directory.is_dir():
            return None
        return LogsResponse(
            kernel_id=kernel_id,
            stdout=tail(directory / kernel_proc.STDOUT, LOG_TAIL_BYTES),
            stderr=tail(directory / kernel_proc.STDERR, LOG_TAIL_BYTES),
        )

    async def police(self) -> list[str]:
        """End every kernel whose directory holds more than the work-dir cap; their ids."""
        cap = self.isolation.options.max_work_dir_bytes
        kernels = [k for k in self._live.values() if not k.destroy_requested and k.killer is None]
        sizes = await asyncio.to_thread(lambda: [dir_size(Path(k.record.directory), cap) for k in kernels])
        over = [k for k, size in zip(kernels, sizes, strict=True) if size > cap and k.killer is None]
        for kernel in over:
            log.warning("kernel.work_dir_over_cap", kernel_id=kernel.kernel_id, cap=cap)
            note_in_log(
                Path(kernel.record.directory) / kernel_proc.STDERR, f"work directory grew past {cap} bytes"
            )
            kernel_proc.killpg(kernel.pid, signal.SIGXFSZ)
            kernel.killer = asyncio.create_task(
                self._kill(kernel, forced=True, grace=self.kill_grace, grace_first=True)
            )
        return [k.kernel_id for k in over]

    async def sweep(self, now: float) -> list[str]:
        """Remove the directories (and logs) of kernels that ended more than `keep_ended_kernels`
        seconds ago; their ids."""
        keep = self.isolation.options.keep_ended_kernels
        async with self._lock:  # no create of the same id meanwhile
            expired = expired_kernel_dirs(self.work_dir, set(self._live), keep, now, valid_kernel_id)
            for directory in expired:
                await asyncio.to_thread(remove_tree, directory)
        if expired:
            log.info("kernel.directories_removed", kernels=[d.name for d in expired], kept_for=keep)
        return [d.name for d in expired]
