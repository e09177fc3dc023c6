"""The container backend: every kernel is one container of an engine that speaks the Docker API.

`check_and_pull` reports PULLING only when the engine must pull (an image it holds is PREPARED at
once); `create` makes the kernel's container (`config`) on its session's network (`networks`),
starts it and reports it RUNNING with the image reference and digest it runs and, for inference,
`http://<service-host>:<port>`. One task per kernel waits for its container to stop: then the
container's output is copied to `<work_dir>/<kernel_id>/stdout.log|stderr.log` (kept, like the
process backend's logs, for `keep_ended_kernels` seconds), the container is removed, and the
kernel reported TERMINATED with its exit code; an OOM kill (the engine's `OOMKilled`, or SIGKILL
while the host's OOM count rose) is "oom". A destroy is SIGTERM, the grace, SIGKILL.

Nothing is kept on the agent's disk about live kernels: the labels of each container (`labels`)
say all the agent needs to take it over after a restart (`start`), and a container of this agent
whose kernel the manager has ended meanwhile is destroyed when the manager reconciles. Events go
out through `emit` as in the process backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import aiodocker
import structlog
from pydantic import BaseModel

from sokovan.agent.container import labels as L
from sokovan.agent.container.config import ContainerOptions, KernelPlacement, create_request
from sokovan.agent.container.engine_calls import agent_containers, start_container, wait_stopped
from sokovan.agent.container.images import ImageStore, PullError
from sokovan.agent.container.kernel import ContainerKernel
from sokovan.agent.container.kernel_logs import engine_tail, save_logs, saved_logs
from sokovan.agent.container.networks import SessionNetworks, needs_network
from sokovan.agent.events import (
    Emit,
    Ended,
    EndReason,
    destroyed_again,
    kernel_ids,
    stop_within_grace,
    valid_kernel_id,
)
from sokovan.agent.housekeeping import expired_kernel_dirs, remove_tree
from sokovan.agent.kernel_uids import KernelUids
from sokovan.agent.log_tail import LOG_TAIL_BYTES
from sokovan.agent.oom import SIGKILL_EXIT, killed_for_memory, oom_kill_count
from sokovan.agent.reconcile import reconcile_event
from sokovan.agent.service_ports import INFERENCE, PortAllocator
from sokovan.common.events import (
    KernelCreationFailed,
    KernelImagePullFailed,
    KernelRunning,
    KernelTerminated,
)
from sokovan.common.image_refs import ImageRefError
from sokovan.common.rpc import KernelSpec, LogsResponse, ReconcileItem
from sokovan.images.engine import describe

log = structlog.get_logger(__name__)

MAX_REMEMBERED = 10_000
ROOT_USERS = frozenset({"", "root", "0", "0:0", "root:root"})


class ContainerBackend:
    """Starts, watches and stops the kernel containers of one agent."""

    name = "container"

    def __init__(
        self,
        agent_id: str,
        docker: aiodocker.Docker,
        work_dir: Path,
        emit: Emit,
        *,
        images: ImageStore,
        networks: SessionNetworks,
        uids: KernelUids,
        options: ContainerOptions,
        kill_grace: float = 5.0,
        service_host: str = "127.0.0.1",
        keep_ended_kernels: float = 3600.0,
    ) -> None:
        self.agent_id = agent_id
        self.docker = docker
        self.work_dir = work_dir
        self.images = images
        self.networks = networks
        self.uids = uids
        self.options = options
        self.kill_grace = kill_grace
        self.service_host = service_host
        self.keep_ended_kernels = keep_ended_kernels
        self.ports = PortAllocator()
        self._emit = emit
        self._live: dict[str, ContainerKernel] = {}
        self._starting: dict[str, asyncio.Task[None]] = {}
        self._ended: OrderedDict[str, Ended] = OrderedDict()

    def running_kernels(self) -> list[str]:
        return sorted(self._live)

    @property
    def registries(self) -> list[str]:
        return self.images.registries

    def images_offered(self) -> list[str]:
        return self.images.offered()

    def describe(self) -> dict[str, object]:
        uids = self.uids.range
        return {
            "backend": self.name,
            "kernel_user": f"a uid per session from {uids.first}-{uids.last} unless the image names one"
            if uids is not None
            else "the image's user",
            "limits": "cgroups of the engine (memory, cpu quota, pids)",
            "networks": self.networks.firewall.note,
            "registries": self.images.registries,
        }

    # images

    async def check_and_pull(self, spec: KernelSpec) -> None:
        await self.images.prepare(spec.image, kernel_ids(self.agent_id, spec), self._emit)

    async def image_available(self, image: str) -> bool:
        return await self.images.available(image)

    # start

    async def create(self, spec: KernelSpec) -> None:
        existing = self._live.get(spec.kernel_id)
        if existing is not None:
            self._emit(self._running_event(existing))
            return
        task = self._starting.get(spec.kernel_id)
        if task is None:  # a repeated create waits for the first one instead of starting another
            task = asyncio.create_task(self._create(spec), name=f"create-{spec.kernel_id}")
            self._starting[spec.kernel_id] = task
            task.add_done_callback(lambda _: self._starting.pop(spec.kernel_id, None))
        await asyncio.shield(task)

    async def _create(self, spec: KernelSpec) -> None:
        ids = kernel_ids(self.agent_id, spec)
        port: int | None = None
        try:
            if not valid_kernel_id(spec.kernel_id):
                raise ValueError(f"invalid kernel id {spec.kernel_id!r}")
            reference = self.images.resolve(spec.image)
            held = await self.images.ensure(reference)
            user = held.user if held.user not in ROOT_USERS else self._session_user(spec.session_id)
            port = self.ports.allocate() if spec.session_type == INFERENCE else None
            network = None
            if needs_network(spec.cluster_size, spec.session_type):
                network = await self.networks.ensure(spec.session_id)
            service_addr = f"http://{self.service_host}:{port}" if port is not None else None
            info = L.KernelLabels(
                kernel_id=spec.kernel_id,
                session_id=spec.session_id,
                agent_id=self.agent_id,
                image=reference,
                digest=held.digest,
                port=port,
                uid=self.uids.of(spec.session_id),
                oom_mark=oom_kill_count(),
                service_addr=service_addr,
            )
            body = create_request(
                spec, KernelPlacement(reference, user, network, port, self.service_host), info, self.options
            )
            engine_started = time.monotonic()
            container_id, pid = await start_container(self.docker, body, f"sokovan-{spec.kernel_id}")
            kernel = ContainerKernel(info, container_id, pid)
        except (PullError, ImageRefError, ValueError, RuntimeError, aiodocker.DockerError, OSError) as exc:
            message = describe(exc) if isinstance(exc, aiodocker.DockerError | OSError) else str(exc)
            log.warning("kernel.creation_failed", **ids, error=message)
            self.ports.release(port)
            self._release_session(spec.session_id)
            if isinstance(exc, PullError):
                self._emit(KernelImagePullFailed(**ids, message=message))
            else:
                self._emit(KernelCreationFailed(**ids, message=f"cannot start the kernel: {message}"))
            return
        self._ended.pop(spec.kernel_id, None)
        self._watch(kernel)
        engine_ms = round((time.monotonic() - engine_started) * 1000, 1)  # create + start + inspect
        log.info(
            "kernel.started",
            **ids,
            container=kernel.container_id[:12],
            image=reference,
            pid=kernel.pid,
            engine_ms=engine_ms,
        )
        self._emit(self._running_event(kernel))

    def _session_user(self, session_id: str) -> str:
        uid = self.uids.acquire(session_id)
        if uid is None:
            raise ValueError("no kernel uid range: the agent cannot pick a non-root user")
        return f"{uid}:{uid}"

    def _release_session(self, session_id: str) -> None:
        if not any(k.session_id == session_id for k in self._live.values()):
            self.uids.release(session_id)

    def _running_event(self, kernel: ContainerKernel) -> KernelRunning:
        return KernelRunning(
            **kernel_ids(self.agent_id, kernel),
            pid=kernel.pid,
            service_addr=kernel.info.service_addr,
            image=kernel.info.image,
            image_digest=kernel.info.digest,
        )

    # watching and the end

    def _watch(self, kernel: ContainerKernel) -> None:
        self._live[kernel.kernel_id] = kernel
        self.ports.reserve(kernel.info.port)
        kernel.watcher = asyncio.create_task(self._await_end(kernel), name=f"kernel-{kernel.kernel_id}")

    async def _await_end(self, kernel: ContainerKernel) -> None:
        state = await wait_stopped(self.docker, kernel)
        exit_code: int | None = None
        reason: EndReason = "lost"
        if state is not None:
            exit_code = int(state.get("ExitCode", 0))
            if kernel.destroy_requested:
                reason = "destroyed"
            elif state.get("OOMKilled") or killed_for_memory(exit_code, kernel.info.oom_mark):
                reason = "oom"
            else:
                reason = "exited"
        if exit_code is None and kernel.killed:
            exit_code = SIGKILL_EXIT
        await self._finish(kernel, exit_code, reason)

    async def _finish(self, kernel: ContainerKernel, exit_code: int | None, reason: EndReason) -> None:
        """Keep the output, remove the container, free what it held, report the end."""
        directory = self.work_dir / kernel.kernel_id
        await save_logs(self.docker, kernel.container_id, directory, self.options.max_log_bytes)
        with contextlib.suppress(aiodocker.DockerError, OSError):
            await self.docker.containers.container(kernel.container_id).delete(force=True)
        self._live.pop(kernel.kernel_id, None)
        self.ports.release(kernel.info.port)
        self._release_session(kernel.session_id)
        if not any(k.session_id == kernel.session_id for k in self._live.values()):
            with contextlib.suppress(aiodocker.DockerError, OSError):
                await self.networks.release(kernel.session_id)
        self._ended[kernel.kernel_id] = Ended(kernel.session_id, exit_code, reason)
        while len(self._ended) > MAX_REMEMBERED:
            self._ended.popitem(last=False)
        log.info("kernel.terminated", kernel_id=kernel.kernel_id, exit_code=exit_code, reason=reason)
        kernel.done.set()
        self._emit(KernelTerminated(**kernel_ids(self.agent_id, kernel), exit_code=exit_code, reason=reason))

    # stop

    async def destroy(self, kernel_id: str, forced: bool = False, grace: float | None = None) -> None:
        starting = self._starting.get(kernel_id)
        if starting is not None:  # a destroy right after a create finds the kernel
            with contextlib.suppress(Exception):
                await asyncio.shield(starting)
        kernel = self._live.get(kernel_id)
        if kernel is None:
            self._emit(destroyed_again(self.agent_id, kernel_id, self._ended.get(kernel_id)))
            return
        kernel.destroy_requested = True
        if forced:
            await self._signal(kernel, "SIGKILL")
        if kernel.killer is None:
            wait = self.kill_grace if grace is None else grace
            kernel.killer = asyncio.create_task(self._kill(kernel, forced, wait), name=f"kill-{kernel_id}")

    async def _signal(self, kernel: ContainerKernel, signal: str) -> None:
        if signal == "SIGKILL":
            kernel.killed = True
        with contextlib.suppress(aiodocker.DockerError, OSError):
            await self.docker.containers.container(kernel.container_id).kill(signal=signal)

    async def _kill(self, kernel: ContainerKernel, forced: bool, grace: float) -> None:
        await stop_within_grace(
            kernel.done,
            lambda: self._signal(kernel, "SIGTERM"),
            lambda: self._signal(kernel, "SIGKILL"),
            forced=forced,
            grace=grace,
            kernel_id=kernel.kernel_id,
        )

    async def shutdown(self) -> None:
        kernels = list(self._live.values())
        for kernel in kernels:
            await self.destroy(kernel.kernel_id)
        await asyncio.gather(*(k.done.wait() for k in kernels))

    async def detach(self) -> list[str]:
        """Stop watching; the containers run on, found again by their labels at the next start."""
        kernels = list(self._live.values())
        tasks = [t for k in kernels for t in (k.watcher, k.killer) if t is not None]
        tasks += list(self._starting.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return sorted(k.kernel_id for k in kernels)

    # restart

    async def start(self) -> list[BaseModel]:
        """Take over this agent's containers: watch the running ones, end the stopped ones.
        The events to publish once the agent has registered (see `ProcessBackend.recover`)."""
        await self.images.refresh()
        found: list[BaseModel] = []
        stopped: list[tuple[ContainerKernel, dict[str, Any]]] = []
        for kernel, state in await agent_containers(self.docker, self.agent_id):
            if kernel.kernel_id in self._live:
                continue
            if state.get("Running"):
                kernel.pid = state.get("Pid") or None
                if kernel.info.uid is not None:
                    self.uids.restore(kernel.session_id, kernel.info.uid)
                self._watch(kernel)
                found.append(self._running_event(kernel))
                log.info("kernel.reattached", kernel_id=kernel.kernel_id, container=kernel.container_id[:12])
            else:
                stopped.append((kernel, state))
        for kernel, state in stopped:
            events: list[BaseModel] = []
            emit, self._emit = self._emit, events.append
            try:
                self._live[kernel.kernel_id] = kernel
                code = int(state.get("ExitCode", 0))
                oom = bool(state.get("OOMKilled")) or killed_for_memory(code, kernel.info.oom_mark)
                await self._finish(kernel, code, "oom" if oom else "exited")
            finally:
                self._emit = emit
            found += events
        return found

    # answers

    async def reconcile(self, item: ReconcileItem) -> None:
        starting = self._starting.get(item.kernel_id)
        if starting is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(starting)
        kernel = self._live.get(item.kernel_id)
        ended = self._ended.get(item.kernel_id)
        available = item.phase == "pull" and await self.image_available(item.image)
        event = reconcile_event(
            self.agent_id,
            item,
            live=kernel is not None,
            pid=kernel.pid if kernel is not None else None,
            ended=(ended.exit_code, ended.reason) if ended is not None else None,
            image_available=available,
            service_addr=kernel.info.service_addr if kernel is not None else None,
        )
        if isinstance(event, KernelRunning) and kernel is not None:
            event = self._running_event(kernel)
        self._emit(event)

    async def read_logs(self, kernel_id: str) -> LogsResponse | None:
        if not valid_kernel_id(kernel_id):
            return None
        kernel = self._live.get(kernel_id)
        if kernel is not None:
            stdout, stderr = await engine_tail(self.docker, kernel.container_id, LOG_TAIL_BYTES)
            return LogsResponse(kernel_id=kernel_id, stdout=stdout, stderr=stderr)
        return saved_logs(self.work_dir / kernel_id, kernel_id)

    # housekeeping

    async def police(self) -> list[str]:
        """Nothing to police: `/home/work` and `/tmp` are tmpfs mounts of a bounded size."""
        return []

    async def sweep(self, now: float) -> list[str]:
        """Forget ended kernels' logs past their keep, and read the engine's images again."""
        await self.images.refresh()
        expired = expired_kernel_dirs(
            self.work_dir, set(self._live), self.keep_ended_kernels, now, valid_kernel_id
        )
        for directory in expired:
            await asyncio.to_thread(remove_tree, directory)
        return [d.name for d in expired]
