"""The agent daemon: registration and heartbeats, kernel events, RPC, shutdown and restart.

Every heartbeat carries the agent's class, its health (`health`) and its kernel count; the interval
is the agent's own option or the cluster's, from etcd (`heartbeat_timing`). A stop either destroys
every kernel (`stop()`, SIGINT) or leaves them running for the next start (`stop(detach=True)`,
SIGTERM); either way, and on every kernel start and end, the kernels are in the state file, and a
start takes over the ones still running (`ProcessBackend.recover`). A restarted agent has a new
`boot_id` and counts its heartbeats from 1 again.

Kernels are isolated as far as the host allows (`isolation`): the start log says how (a uid
per session or the agent's own user; cgroup v2 or rlimits). Every `housekeeping_interval` seconds
kernels whose directory passed the work-dir cap are ended and the directories of kernels that
ended more than `keep_ended_kernels` seconds ago are removed (`ProcessBackend.police`, `sweep`).

Every event goes through one outbox (`outbox.EventOutbox`), published by one task in the order
it was emitted, and retried while Redis is unreachable; so the manager sees, per agent, the
heartbeat that registered it before any kernel event, and KernelRunning before the
KernelTerminated of the same kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiodocker
import structlog
from pydantic import BaseModel

from sokovan.agent.backends import ContainerConfig, KernelBackend, container_backend, open_engine
from sokovan.agent.container.engine_client import close_client
from sokovan.agent.fence import Fence
from sokovan.agent.gpu.hollow import HollowDevices
from sokovan.agent.gpu.nvml import NvmlDevices
from sokovan.agent.gpu.source import DeviceSource, NoDevices, offered_slots
from sokovan.agent.health import DEFAULT_MIN_FREE_DISK, check_health
from sokovan.agent.heartbeat_timing import HeartbeatInterval
from sokovan.agent.images import ImageCatalog
from sokovan.agent.isolation import Isolation, IsolationOptions
from sokovan.agent.kernel_uids import KernelUids
from sokovan.agent.outbox import MAX_PENDING
from sokovan.agent.process_backend import ProcessBackend
from sokovan.agent.rpc_guard import FLOOR_FILE
from sokovan.agent.rpc_server import RPCServer, single_agent
from sokovan.agent.runtime import AgentLink, AgentStartError
from sokovan.agent.service_ports import service_host
from sokovan.agent.signals import run_until
from sokovan.agent.state_file import StateFile, default_path
from sokovan.agent.work_dir import default_work_dir, ensure_work_dir
from sokovan.common.events import AgentHeartbeat, AgentStopping, KernelTerminated
from sokovan.common.gpu import DEVICE_SLOT
from sokovan.common.lifecycle import Service
from sokovan.common.rpc import (
    AcceptedResponse,
    CheckAndPullRequest,
    CreateKernelsRequest,
    DestroyKernelsRequest,
    LogsRequest,
    LogsResponse,
    ReconcileRequest,
)
from sokovan.common.settings import Settings
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentClass

log = structlog.get_logger(__name__)

DRAIN_TIMEOUT = 10.0
HOUSEKEEPING_INTERVAL = 10.0
# How long an RPC call waits for its kernels' pulls and starts before it answers (the manager's
# RPC timeout is 10 s); what is not done by then goes on, and its events go by the bus alone.
ANSWER_WAIT = 5.0
FOLLOW_STEP = 1.0  # the heartbeat loop looks at the (live) interval at least this often


@dataclass
class AgentConfig:
    agent_id: str
    scaling_group: str = "default"
    slots: ResourceSlots = field(default_factory=ResourceSlots)
    rpc_host: str = "127.0.0.1"
    rpc_port: int = 6011
    catalog: ImageCatalog = field(default_factory=ImageCatalog)
    work_dir: Path | None = None  # default: `work_dir.default_work_dir` (never under /tmp)
    kill_grace: float = 5.0
    heartbeat_interval: float | None = None  # None: the cluster's, from etcd (10 s without it)
    max_kernels: int | None = None
    agent_class: AgentClass = AgentClass.STANDARD
    min_free_disk: int = DEFAULT_MIN_FREE_DISK  # bytes; less free in the work dir is unhealthy
    state_file: Path | None = None  # default: <work_dir>/agent-state.json
    # Fault injection for tests: the first event of each of these kinds is dropped (see outbox).
    drop_events: frozenset[str] = frozenset()
    isolation: IsolationOptions = field(default_factory=IsolationOptions)
    max_outbox: int = MAX_PENDING  # events kept while Redis is unreachable
    housekeeping_interval: float = HOUSEKEEPING_INTERVAL
    containers: ContainerConfig = field(default_factory=ContainerConfig)
    service_host: str | None = None  # where inference ports are published (default: from rpc_host)
    # GPUs (CONTRACT section 15): None finds them through NVML; a number declares that many hollow
    # devices (`--gpus`, for tests on machines without one), unhealthy where `device_faults` says.
    gpus: int | None = None
    device_faults: Path | None = None

    def resolved_work_dir(self) -> Path:
        return self.work_dir or default_work_dir(self.agent_id)

    def resolved_state_file(self) -> Path:
        return self.state_file or default_path(self.resolved_work_dir())


def device_source(config: AgentConfig) -> DeviceSource:
    """The agent's GPUs: declared hollow ones (`--gpus`), else NVML's, else none."""
    if config.gpus is not None:
        return HollowDevices(config.agent_id, config.gpus, config.device_faults)
    return NvmlDevices.discover() or NoDevices()


class AgentDaemon(Service):
    """One agent with the process backend; `start()`, then `stop()` (or `run(stop_event)`)."""

    def __init__(self, settings: Settings, config: AgentConfig) -> None:
        self._link = AgentLink(settings, config.drop_events)
        self._outbox = self._link.outbox
        self.settings = settings
        self.config = config
        self.agent_id = config.agent_id
        self.boot_id = uuid.uuid4().hex
        self.work_dir = config.resolved_work_dir()
        self.state_file = config.resolved_state_file()
        self._outbox.max_pending = config.max_outbox
        self.isolation, self._cgroup_note = Isolation.detect(config.isolation)
        self.service_host = config.service_host or service_host(config.rpc_host)
        self.backend: KernelBackend = ProcessBackend(
            config.agent_id,
            self.work_dir,
            config.catalog,
            self._emit,
            config.kill_grace,
            service_host=self.service_host,
            state=StateFile(self.state_file, config.agent_id),
            isolation=self.isolation,
        )
        self.gpus = device_source(config)
        self._engine: aiodocker.Docker | None = None
        self._calls: set[asyncio.Task[None]] = set()
        self.interval = HeartbeatInterval(settings, config.heartbeat_interval)
        self._rpc = RPCServer(
            single_agent(self),
            self._link.secret,
            config.rpc_host,
            config.rpc_port,
            floor_file=self.work_dir / FLOOR_FILE,
        )
        self.fence = Fence(
            config.agent_class,
            self.interval.timings,
            lambda: self._outbox.last_heartbeat_at,
            lambda: self.backend.running_kernels(),
            self._stop_kernels,
        )
        self._seq = 0
        self._stopping = asyncio.Event()
        self._started = False
        self._stopped = False

    @property
    def rpc_addr(self) -> str:
        return self._rpc.rpc_addr

    async def _pick_backend(self) -> None:
        """The container backend when its engine answers (`--backend auto|container`)."""
        wanted = self.config.containers.backend
        if wanted == "process":
            return
        opened = await open_engine(self.config.containers)
        if isinstance(opened, str):
            if wanted == "container":
                raise AgentStartError(f"--backend container: {opened}")
            log.warning("agent.no_engine", reason=opened, backend="process")
            return
        self._engine, url = opened
        containers = self.config.containers
        self.backend = container_backend(
            self._engine,
            replace(containers, options=replace(containers.options, real_devices=self.gpus.real)),
            agent_id=self.agent_id,
            work_dir=self.work_dir,
            emit=self._emit,
            uids=KernelUids(self.config.isolation.kernel_uids),
            kill_grace=self.config.kill_grace,
            service_host=self.service_host,
            keep_ended_kernels=self.config.isolation.keep_ended_kernels,
        )
        log.info("agent.engine", engine=url)

    async def start(self) -> None:
        ensure_work_dir(self.work_dir)  # before anything is written there or read from it
        await self._pick_backend()
        try:
            await self._link.open(
                self._rpc, "the agent", prepare=lambda: self.isolation.prepare_work_dir(self.work_dir)
            )
        except AgentStartError:
            await self._close_engine()
            raise
        self._started = True
        try:
            recovered = await self.backend.start()
        except (aiodocker.DockerError, OSError) as exc:
            await self._link.close()
            await self._close_engine()
            raise AgentStartError(f"cannot take over the engine's kernels: {exc}") from exc
        self._link.spawn(self._outbox.run(), name="agent-outbox")
        self._heartbeat()  # the first heartbeat is the registration
        for event in recovered:  # after the registration, before anything a kernel does next
            self._outbox.emit(event)
        self._link.spawn(self.interval.follow(), name="agent-heartbeat-interval")
        self._link.spawn(self._heartbeat_loop(), name="agent-heartbeat")
        self._link.spawn(self._housekeeping_loop(), name="agent-housekeeping")
        self._link.spawn(self.fence.run(self._stopping), name="agent-fence")
        log.info(
            "agent.started",
            agent_id=self.agent_id,
            rpc_addr=self.rpc_addr,
            boot_id=self.boot_id,
            kernels_taken_over=self.backend.running_kernels(),
            heartbeat_interval=self.interval.source,
            max_outbox=self.config.max_outbox,
        )
        log.info("agent.backend", **self.backend.describe(), cgroups=self._cgroup_note)

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop` is set; a `StopSignal` set by SIGTERM leaves the kernels running."""
        self._link.watch(stop)
        await run_until(self, stop)

    @property
    def failure(self) -> str | None:
        """Why a background task ended the daemon, if one did."""
        return self._link.failure

    async def stop(self, detach: bool = False) -> None:
        """Announce the stop, close the RPC server, flush the events. Every kernel is destroyed
        first, or with `detach` left running and recorded in the state file."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        self._outbox.emit(AgentStopping(agent_id=self.agent_id, boot_id=self.boot_id))
        await self._rpc.stop()
        if detach:
            left = await self.backend.detach()
            log.info("agent.kernels_left_running", kernels=left, state_file=str(self.state_file))
        else:
            try:
                await asyncio.wait_for(self.backend.shutdown(), self.config.kill_grace + DRAIN_TIMEOUT)
            except TimeoutError:
                log.error("agent.kernels_survived_stop", kernels=self.backend.running_kernels())
        if not await self._outbox.drain(DRAIN_TIMEOUT):
            log.warning("agent.events_lost_at_stop", agent_id=self.agent_id)
        await self._link.close()
        await self._close_engine()
        log.info("agent.stopped", agent_id=self.agent_id)

    async def _close_engine(self) -> None:
        if self._engine is not None:
            await close_client(self._engine)
            self._engine = None

    def _heartbeat(self) -> None:
        self._seq += 1
        running = self.backend.running_kernels()
        slots = self.config.slots.to_json()
        devices = self.gpus.sample()
        self._outbox.emit(
            AgentHeartbeat(
                agent_id=self.agent_id,
                seq=self._seq,
                boot_id=self.boot_id,
                agent_class=self.config.agent_class.value,
                health=check_health(self.work_dir, self.config.min_free_disk),
                scaling_group=self.config.scaling_group,
                available_slots=offered_slots(slots, devices, fixed=DEVICE_SLOT in slots),
                images=self.backend.images_offered(),
                registries=self.backend.registries,
                backend=self.backend.name,
                rpc_addr=self.rpc_addr,
                running_kernels=running,
                kernel_count=len(running),
                max_kernels=self.config.max_kernels,
                devices=devices,
            )
        )

    async def _heartbeat_loop(self) -> None:
        """A beat every `interval.current()` seconds; the interval is looked at again at least
        every FOLLOW_STEP seconds, so a change made in etcd applies within about a second."""
        loop = asyncio.get_running_loop()
        last = loop.time()
        while not self._stopping.is_set():
            wait = last + self.interval.current() - loop.time()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), min(wait, FOLLOW_STEP))
                continue
            self._heartbeat()
            last = loop.time()

    async def _housekeeping_loop(self) -> None:
        """The work-dir cap and the retention of ended kernels' directories, now and then."""
        while not self._stopping.is_set():
            try:
                await self.backend.police()
                await self.backend.sweep(time.time())
            except OSError as exc:
                log.warning("agent.housekeeping_failed", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.config.housekeeping_interval)

    def _emit(self, event: BaseModel) -> None:
        """The backends' events into the outbox; a kernel the fence stopped ends "lost" (its session
        is retried, AGENT_TRANSIENT, whether or not the manager has declared this agent DOWN yet)."""
        if isinstance(event, KernelTerminated) and self.fence.stopped_by_fence(event.kernel_id):
            event = event.model_copy(update={"reason": "lost"})
        self._outbox.emit(event)

    async def _stop_kernels(self, kernel_ids: list[str]) -> None:
        """What the fence stops: SIGTERM, the kill grace, SIGKILL, as a terminate does."""
        await asyncio.gather(*(self.backend.destroy(k) for k in kernel_ids), return_exceptions=True)

    # RPC handlers (see rpc_server.AgentRPCHandlers)

    async def _within_answer(self, calls: list[Coroutine[Any, Any, None]]) -> None:
        """Run `calls` at once and wait up to ANSWER_WAIT for them: a slow pull or start goes on
        after the answer (its events then go by the bus alone)."""
        if not calls:
            return
        tasks = [asyncio.create_task(call) for call in calls]
        for task in tasks:
            self._calls.add(task)
            task.add_done_callback(self._calls.discard)
        await asyncio.wait(tasks, timeout=ANSWER_WAIT)

    async def check_and_pull(self, request: CheckAndPullRequest) -> AcceptedResponse:
        if isinstance(self.backend, ProcessBackend):  # at once, in the call's own task
            for spec in request.kernels:
                await self.backend.check_and_pull(spec)
        else:
            await self._within_answer([self.backend.check_and_pull(spec) for spec in request.kernels])
        return AcceptedResponse(accepted=[spec.kernel_id for spec in request.kernels])

    async def create_kernels(self, request: CreateKernelsRequest) -> AcceptedResponse:
        for spec in request.kernels:
            self.fence.started(spec.kernel_id)
        if isinstance(self.backend, ProcessBackend):
            for spec in request.kernels:
                await self.backend.create(spec)
        else:
            await self._within_answer([self.backend.create(spec) for spec in request.kernels])
        return AcceptedResponse(accepted=[spec.kernel_id for spec in request.kernels])

    async def destroy_kernels(self, request: DestroyKernelsRequest) -> AcceptedResponse:
        for kernel_id in request.kernel_ids:
            await self.backend.destroy(kernel_id, forced=request.forced, grace=request.grace)
        return AcceptedResponse(accepted=list(request.kernel_ids))

    async def reconcile(self, request: ReconcileRequest) -> AcceptedResponse:
        for item in request.kernels:
            await self.backend.reconcile(item)
        return AcceptedResponse(accepted=[item.kernel_id for item in request.kernels])

    async def logs(self, request: LogsRequest) -> LogsResponse | None:
        return await self.backend.read_logs(request.kernel_id)
