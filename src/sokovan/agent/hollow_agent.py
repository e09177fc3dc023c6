"""One virtual agent of a hollow fleet: the agent RPC, with kernels that are timers.

A kernel whose command is `sleep S` (or `exec sleep S`) runs for S seconds and exits 0; any
other command, or none, runs until it is destroyed. Nothing is started: a kernel is an entry in
a dict and, for a sleep, one `loop.call_later` timer. Every event is the one a real agent would
publish for the same call, emitted into the fleet's shared outbox. An inference kernel is served
by the fleet (`hollow_services`) while it lives, and reports that endpoint as its service address.
Its kernels can be exported and restored (`hollow_state`), so that a restarted fleet takes them over.

A destroy is a simulated SIGTERM: a hollow kernel "traps TERM" and ends (exit 143) after its
reaction time, the fleet's `stop_delay` (0: at once); one that ignores TERM (the fleet's
`ignore_term`, or a command with `trap '' TERM` in it, as a real kernel would) is "killed" (exit
137) when the grace ends. So a kernel ends after min(grace, reaction time), never later than its
grace (the request's, else `DEFAULT_KILL_GRACE`, the process agent's default). A kernel within its
grace keeps it: a repeated destroy neither restarts nor shortens it, unless `forced`, which ends
it at once (exit 137). A `sleep S` kernel whose timer runs out within its grace exits 0 then.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from sokovan.agent.events import (
    Emit,
    Ended,
    destroyed_again,
    image_unavailable,
    kernel_ids,
    valid_kernel_id,
)
from sokovan.agent.gpu.hollow import hollow_devices
from sokovan.agent.gpu.source import offered_slots
from sokovan.agent.hollow_commands import EXIT_KILL, EXIT_TERM, ignores_term, sleep_seconds, stop_after
from sokovan.agent.hollow_services import HollowServices
from sokovan.agent.hollow_state import HollowKernelRecord
from sokovan.agent.images import ImageCatalog
from sokovan.agent.reconcile import reconcile_event
from sokovan.agent.service_ports import INFERENCE
from sokovan.common.events import (
    AgentHealth,
    AgentHeartbeat,
    KernelCreationFailed,
    KernelImagePullFailed,
    KernelPrepared,
    KernelPulling,
    KernelRunning,
    KernelTerminated,
)
from sokovan.common.rpc import (
    AcceptedResponse,
    CheckAndPullRequest,
    CreateKernelsRequest,
    DestroyKernelsRequest,
    KernelSpec,
    LogsRequest,
    LogsResponse,
    ReconcileItem,
    ReconcileRequest,
)

EndReason = Literal["exited", "destroyed"]

MAX_ENDED = 256  # ended kernels per agent whose exit code and reason are kept (destroy, logs, reconcile)
DEFAULT_KILL_GRACE = 5.0  # a destroy without a grace: the process agent's default `--kill-grace`


@dataclass(frozen=True)
class HollowBehaviour:
    """What every agent of one fleet shares: its catalog, capacity and simulated pull."""

    scaling_group: str
    available_slots: dict[str, str]
    catalog: ImageCatalog
    pull_delay: float
    pull_failure_rate: float
    rng: random.Random
    max_kernels: int | None = None
    agent_class: str = "standard"
    stop_delay: float = 0.0  # seconds a kernel takes to end after SIGTERM (its simulated reaction)
    ignore_term: bool = False  # every kernel ignores SIGTERM: it ends only when its grace ends
    gpus: int = 0  # hollow devices per agent (`--gpus`)
    fixed_device_slots: bool = False  # `--slots` names cuda.device: it wins over the devices


class _Kernel:
    __slots__ = (
        "destroying",
        "ends_at",
        "ignores_term",
        "kernel_id",
        "service_addr",
        "session_id",
        "stop_exit",
        "stop_timer",
        "stops_at",
        "timer",
    )

    def __init__(self, kernel_id: str, session_id: str, ignores_term: bool = False) -> None:
        self.kernel_id = kernel_id
        self.session_id = session_id
        self.timer: asyncio.TimerHandle | None = None
        self.ends_at: float | None = None  # wall clock, for the state file
        self.service_addr: str | None = None
        self.ignores_term = ignores_term
        self.destroying = False  # sent SIGTERM: within its grace
        self.stop_timer: asyncio.TimerHandle | None = None  # ends it when its grace or reaction ends
        self.stops_at: float | None = None  # wall clock, for the state file
        self.stop_exit = EXIT_TERM


class HollowAgent:
    """One virtual agent; implements `rpc_server.AgentRPCHandlers`."""

    def __init__(
        self,
        agent_id: str,
        boot_id: str,
        behaviour: HollowBehaviour,
        emit: Emit,
        services: HollowServices | None = None,
        changed: Callable[[], None] | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.boot_id = boot_id
        self.seq = 0
        self._behaviour = behaviour
        self._images = behaviour.catalog.names()
        self._emit = emit
        self._live: dict[str, _Kernel] = {}
        self._ended: OrderedDict[str, Ended] = OrderedDict()
        self._pulls: set[asyncio.TimerHandle] = set()
        self._services = services if services is not None else HollowServices()
        self._changed = changed or (lambda: None)  # told whenever a kernel starts or ends

    def running_kernels(self) -> list[str]:
        return sorted(self._live)

    def heartbeat(
        self, rpc_addr: str, health: AgentHealth | None = None, faults: set[tuple[str, int]] | None = None
    ) -> None:
        """Emit the next beat; `health` is the fleet's shared summary (healthy by default)."""
        self.seq += 1
        running = self.running_kernels()
        behaviour = self._behaviour
        devices = hollow_devices(self.agent_id, behaviour.gpus, faults or set())
        slots = offered_slots(behaviour.available_slots, devices, behaviour.fixed_device_slots)
        self._emit(
            AgentHeartbeat(
                agent_id=self.agent_id,
                seq=self.seq,
                boot_id=self.boot_id,
                agent_class=self._behaviour.agent_class,
                health=health if health is not None else AgentHealth(),
                scaling_group=self._behaviour.scaling_group,
                available_slots=slots,
                images=self._images,
                backend="hollow",
                rpc_addr=rpc_addr,
                running_kernels=running,
                kernel_count=len(running),
                max_kernels=self._behaviour.max_kernels,
                devices=devices,
            )
        )

    def shutdown(self) -> None:
        """Drop the pulls in flight and end every kernel as destroyed."""
        for handle in self._pulls:
            handle.cancel()
        self._pulls.clear()
        for kernel in list(self._live.values()):
            self._end(kernel, EXIT_TERM, "destroyed")

    def detach(self) -> None:
        """Drop the pulls in flight and stop the kernels' timers, reporting nothing: the kernels
        are exported (`export`) for the next start of the fleet."""
        for handle in self._pulls:
            handle.cancel()
        self._pulls.clear()
        for kernel in self._live.values():
            _cancel_timers(kernel)

    def export(self) -> list[HollowKernelRecord]:
        return [
            HollowKernelRecord(
                kernel_id=k.kernel_id,
                session_id=k.session_id,
                ends_at=k.ends_at,
                serves=k.service_addr is not None,
                ignores_term=k.ignores_term,
                stops_at=k.stops_at,
                stop_exit=k.stop_exit if k.stops_at is not None else None,
            )
            for k in self._live.values()
        ]

    def restore(self, records: list[HollowKernelRecord]) -> None:
        """Take over kernels of an earlier run of the fleet: their timers go on with the time left
        (one that ran out ends at once, exit 0); one within its grace keeps what is left of it."""
        now = time.time()
        for record in records:
            if record.kernel_id in self._live or not valid_kernel_id(record.kernel_id):
                continue
            kernel = _Kernel(record.kernel_id, record.session_id, record.ignores_term)
            if record.serves:
                kernel.service_addr = self._services.add(record.kernel_id, self.agent_id)
            self._live[record.kernel_id] = kernel
            if record.ends_at is not None:
                self._arm(kernel, record.ends_at, max(record.ends_at - now, 0.0))
            if record.stops_at is not None:
                exit_code = EXIT_TERM if record.stop_exit is None else record.stop_exit
                self._arm_stop(kernel, record.stops_at, max(record.stops_at - now, 0.0), exit_code)

    # RPC handlers

    async def check_and_pull(self, request: CheckAndPullRequest) -> AcceptedResponse:
        behaviour = self._behaviour
        outcomes: list[BaseModel] = []
        for spec in request.kernels:
            ids = kernel_ids(self.agent_id, spec)
            self._emit(KernelPulling(**ids))
            if spec.image not in behaviour.catalog:
                self._emit(KernelImagePullFailed(**ids, message=image_unavailable(spec.image, self.agent_id)))
            elif behaviour.pull_failure_rate > 0 and behaviour.rng.random() < behaviour.pull_failure_rate:
                message = f"simulated pull failure of image {spec.image!r} on agent {self.agent_id}"
                outcomes.append(KernelImagePullFailed(**ids, message=message))
            else:
                outcomes.append(KernelPrepared(**ids))
        if outcomes and behaviour.pull_delay > 0:
            loop = asyncio.get_running_loop()
            handle: asyncio.TimerHandle | None = None

            def finish() -> None:
                assert handle is not None
                self._pulls.discard(handle)
                self._emit_all(outcomes)

            handle = loop.call_later(behaviour.pull_delay, finish)
            self._pulls.add(handle)
        else:
            self._emit_all(outcomes)
        return AcceptedResponse(accepted=[spec.kernel_id for spec in request.kernels])

    async def create_kernels(self, request: CreateKernelsRequest) -> AcceptedResponse:
        for spec in request.kernels:
            self._create(spec)
        return AcceptedResponse(accepted=[spec.kernel_id for spec in request.kernels])

    async def destroy_kernels(self, request: DestroyKernelsRequest) -> AcceptedResponse:
        for kernel_id in request.kernel_ids:
            self._destroy(kernel_id, request.forced, request.grace)
        return AcceptedResponse(accepted=list(request.kernel_ids))

    async def reconcile(self, request: ReconcileRequest) -> AcceptedResponse:
        for item in request.kernels:
            self._emit(self._state(item))
        return AcceptedResponse(accepted=[item.kernel_id for item in request.kernels])

    async def logs(self, request: LogsRequest) -> LogsResponse | None:
        kernel_id = request.kernel_id
        if kernel_id not in self._live and kernel_id not in self._ended:
            return None
        return LogsResponse(kernel_id=kernel_id, stdout=f"simulated kernel {kernel_id}\n")

    # kernels

    def _emit_all(self, events: list[BaseModel]) -> None:
        for event in events:
            self._emit(event)

    def _create(self, spec: KernelSpec) -> None:
        existing = self._live.get(spec.kernel_id)
        if existing is not None:  # a repeated create: report it again, start nothing
            self._emit(self._running(existing))
            return
        problem = None
        if not valid_kernel_id(spec.kernel_id):
            problem = f"invalid kernel id {spec.kernel_id!r}"
        elif spec.image not in self._behaviour.catalog:
            problem = image_unavailable(spec.image, self.agent_id)
        if problem is not None:
            self._emit(KernelCreationFailed(**kernel_ids(self.agent_id, spec), message=problem))
            return
        kernel = _Kernel(spec.kernel_id, spec.session_id, ignores_term(spec.command))
        if spec.session_type == INFERENCE:
            kernel.service_addr = self._services.add(spec.kernel_id, self.agent_id)
        self._live[spec.kernel_id] = kernel
        self._ended.pop(spec.kernel_id, None)
        self._emit(self._running(kernel))
        seconds = sleep_seconds(spec.command)
        if seconds is not None:
            self._arm(kernel, time.time() + seconds, seconds)
        self._changed()

    def _arm(self, kernel: _Kernel, ends_at: float, seconds: float) -> None:
        kernel.ends_at = ends_at
        kernel.timer = asyncio.get_running_loop().call_later(seconds, self._exited, kernel)

    def _state(self, item: ReconcileItem) -> BaseModel:
        """The one event that tells `item`'s current state (see `ProcessBackend.reconcile`).

        A "pull" kernel is prepared when its image is in the catalog: the pull failure rate
        simulates pulls, and reconcile pulls nothing."""
        ended = self._ended.get(item.kernel_id)
        kernel = self._live.get(item.kernel_id)
        return reconcile_event(
            self.agent_id,
            item,
            live=kernel is not None,
            ended=(ended.exit_code, ended.reason) if ended is not None else None,
            image_available=item.image in self._behaviour.catalog,
            service_addr=kernel.service_addr if kernel is not None else None,
        )

    def _running(self, kernel: _Kernel) -> KernelRunning:
        return KernelRunning(**kernel_ids(self.agent_id, kernel), service_addr=kernel.service_addr)

    def _exited(self, kernel: _Kernel) -> None:
        if self._live.get(kernel.kernel_id) is kernel:
            self._end(kernel, 0, "destroyed" if kernel.destroying else "exited")

    def _stopped(self, kernel: _Kernel, exit_code: int) -> None:
        if self._live.get(kernel.kernel_id) is kernel:
            self._end(kernel, exit_code, "destroyed")

    def _destroy(self, kernel_id: str, forced: bool, grace: float | None = None) -> None:
        kernel = self._live.get(kernel_id)
        if kernel is None:
            self._emit(destroyed_again(self.agent_id, kernel_id, self._ended.get(kernel_id)))
            return
        if forced:
            self._end(kernel, EXIT_KILL, "destroyed")
            return
        if kernel.destroying:  # within its grace already: it keeps it
            return
        behaviour = self._behaviour
        reaction = None if behaviour.ignore_term or kernel.ignores_term else behaviour.stop_delay
        delay, exit_code = stop_after(DEFAULT_KILL_GRACE if grace is None else grace, reaction)
        if delay <= 0:
            self._end(kernel, exit_code, "destroyed")
            return
        self._arm_stop(kernel, time.time() + delay, delay, exit_code)
        self._changed()

    def _arm_stop(self, kernel: _Kernel, stops_at: float, seconds: float, exit_code: int) -> None:
        kernel.destroying = True
        kernel.stops_at, kernel.stop_exit = stops_at, exit_code
        kernel.stop_timer = asyncio.get_running_loop().call_later(seconds, self._stopped, kernel, exit_code)

    def _end(self, kernel: _Kernel, exit_code: int, reason: EndReason) -> None:
        del self._live[kernel.kernel_id]
        if kernel.service_addr is not None:
            self._services.discard(kernel.kernel_id, self.agent_id)
        _cancel_timers(kernel)
        self._ended[kernel.kernel_id] = Ended(kernel.session_id, exit_code, reason)
        while len(self._ended) > MAX_ENDED:
            self._ended.popitem(last=False)
        self._changed()
        self._emit(KernelTerminated(**kernel_ids(self.agent_id, kernel), exit_code=exit_code, reason=reason))


def _cancel_timers(kernel: _Kernel) -> None:
    for handle in (kernel.timer, kernel.stop_timer):
        if handle is not None:
            handle.cancel()
    kernel.timer = kernel.stop_timer = None
