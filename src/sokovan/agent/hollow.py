"""A hollow fleet: N virtual agents in one process, on one RPC port (like Kubernetes' kubemark).

Each virtual agent (`hollow_agent.HollowAgent`) has its own id `<prefix>-0000 …`, boot id and
heartbeat sequence, and answers the same RPC as a real agent; the one `RPCServer` routes each
request by its signed `X-Sokovan-Agent` header. All of them share one Redis connection and one
outbox (so events are published in emission order, per agent as well, in pipelined batches), and
one heartbeat loop: the first beats (the registrations) are spread over the first second, then
each agent beats every `heartbeat_interval` at its own phase, so a fleet of N sends a steady
N / interval beats per second instead of N tasks waking up. The interval is the fleet's option or
the cluster's from etcd, followed live (`heartbeat_timing`); every agent reports the fleet's one
shared health summary (`health.FleetHealth`) and the fleet's `--class`; agents named in the pause
file (`pause_file`) skip their beats while they are listed. With a state file (`hollow_state`) a
SIGTERM leaves the kernels to the next start of the fleet, as a process agent's SIGTERM does;
otherwise both signals end them. Kernels are timers (`call_later`),
never tasks, so ten thousand of them cost only memory. The same port also answers for the fleet's
inference kernels' service endpoints (`hollow_services`), unsigned and apart from the RPC.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from sokovan.agent.gpu.hollow import FaultsFile
from sokovan.agent.health import FleetHealth
from sokovan.agent.heartbeat_timing import HeartbeatInterval
from sokovan.agent.hollow_agent import HollowAgent, HollowBehaviour
from sokovan.agent.hollow_services import HollowServices
from sokovan.agent.hollow_state import HollowKernelRecord, HollowStateFile, StateKeeper
from sokovan.agent.images import ImageCatalog
from sokovan.agent.outbox import MAX_PENDING, EventOutbox
from sokovan.agent.pause_file import PauseFile
from sokovan.agent.rpc_guard import FLOOR_FILE, MAX_READS
from sokovan.agent.rpc_server import RPCServer
from sokovan.agent.runtime import AgentLink
from sokovan.agent.signals import run_until
from sokovan.common.events import AgentStopping
from sokovan.common.gpu import DEVICE_SLOT
from sokovan.common.lifecycle import Service
from sokovan.common.settings import Settings
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentClass

log = structlog.get_logger(__name__)

DEFAULT_SLOTS = "cpu=4,mem=8g"
REGISTRATION_SPREAD = 1.0  # seconds over which the first beats of the fleet are spread
TICK = 0.05  # the heartbeat loop wakes at most this often
FOLLOW_STEP = 1.0  # ... and at least this often (a changed interval, the pause file)
DRAIN_TIMEOUT = 30.0
# The fleet's one outbox stands for N agents' outboxes: its bound grows with the fleet, so that a
# burst of start-ups (thousands of kernels prepared in one cycle, several events each) is never
# cut short by a bound meant for one agent (`outbox_bound`).
OUTBOX_PER_AGENT = 100


def outbox_bound(count: int) -> int:
    """How many unpublished events a fleet of `count` agents keeps (one agent's bound, plus
    `OUTBOX_PER_AGENT` for every agent: 110,000 events, some 60 MB, for a thousand)."""
    return MAX_PENDING + OUTBOX_PER_AGENT * count


def hollow_ids(prefix: str, count: int) -> list[str]:
    """`<prefix>-0000 … <prefix>-NNNN`: four digits, more when the fleet needs them."""
    width = max(4, len(str(count - 1)))
    return [f"{prefix}-{i:0{width}d}" for i in range(count)]


@dataclass
class HollowConfig:
    count: int
    prefix: str = "hollow"
    scaling_group: str = "default"
    slots: ResourceSlots = field(default_factory=lambda: ResourceSlots.parse_cli(DEFAULT_SLOTS))
    rpc_host: str = "127.0.0.1"
    rpc_port: int = 6011
    catalog: ImageCatalog = field(default_factory=ImageCatalog)
    pull_delay: float = 0.0
    pull_failure_rate: float = 0.0
    seed: int = 0
    heartbeat_interval: float | None = None  # None: the cluster's, from etcd (10 s without it)
    max_kernels: int | None = None
    registration_spread: float = REGISTRATION_SPREAD
    agent_class: AgentClass = AgentClass.STANDARD
    pause_file: Path | None = None
    state_file: Path | None = None  # None: the kernels do not outlive the fleet
    # A destroyed kernel's simulated reaction to SIGTERM: it ends `stop_delay` seconds later, or
    # (`ignore_term`) only when its grace ends; never later than the grace (see hollow_agent).
    stop_delay: float = 0.0
    ignore_term: bool = False
    # Fault injection for tests: the first event of each of these kinds, across the whole fleet,
    # is dropped (see outbox.EventDropper).
    drop_events: frozenset[str] = frozenset()
    gpus: int = 0  # hollow GPUs per agent (CONTRACT section 15)
    device_faults: Path | None = None  # lines `<agent id> <index>`: those devices are unhealthy

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError("a hollow fleet needs at least one agent")
        if not 0.0 <= self.pull_failure_rate <= 1.0:
            raise ValueError("the pull failure rate must be between 0 and 1")
        if self.pull_delay < 0:
            raise ValueError("the pull delay must not be negative")
        if not 0 <= self.stop_delay < math.inf:
            raise ValueError("the stop delay must be a finite number of seconds, not negative")
        if self.heartbeat_interval is not None and self.heartbeat_interval <= 0:
            raise ValueError("the heartbeat interval must be positive")


class HollowFleet(Service):
    """N virtual agents; `start()`, then `stop()` (or `run(stop_event)`)."""

    def __init__(self, settings: Settings, config: HollowConfig) -> None:
        self._link = AgentLink(settings, config.drop_events)
        self._outbox = self._link.outbox
        self._outbox.max_pending = outbox_bound(config.count)
        self.settings = settings
        self.config = config
        behaviour = HollowBehaviour(
            scaling_group=config.scaling_group,
            available_slots=config.slots.to_json(),
            catalog=config.catalog,
            pull_delay=config.pull_delay,
            pull_failure_rate=config.pull_failure_rate,
            rng=random.Random(config.seed),
            max_kernels=config.max_kernels,
            agent_class=config.agent_class.value,
            stop_delay=config.stop_delay,
            ignore_term=config.ignore_term,
            gpus=config.gpus,
            fixed_device_slots=DEVICE_SLOT in config.slots.to_json(),
        )
        self.interval = HeartbeatInterval(settings, config.heartbeat_interval)
        self.health = FleetHealth()
        self.pauses = PauseFile(config.pause_file)
        self.faults = FaultsFile(config.device_faults)
        self.services = HollowServices()
        self.keeper = (
            StateKeeper(HollowStateFile(config.state_file), self._snapshot) if config.state_file else None
        )
        changed = self.keeper.mark if self.keeper is not None else None
        self.agents: dict[str, HollowAgent] = {
            agent_id: HollowAgent(
                agent_id, uuid.uuid4().hex, behaviour, self._outbox.emit, self.services, changed
            )
            for agent_id in hollow_ids(config.prefix, config.count)
        }
        self._rpc = RPCServer(
            self.agents.get,
            self._link.secret,
            config.rpc_host,
            config.rpc_port,
            extra_routes=self.services.add_routes,
            # A fleet's kernels outlive it with its state file: so does its RPC's floor (rpc_guard).
            floor_file=config.state_file.with_name(f"{config.state_file.name}.{FLOOR_FILE}")
            if config.state_file
            else None,
            max_reads=max(MAX_READS, config.count),  # one address serves all its agents' calls
        )
        self._stopping = asyncio.Event()
        self._heartbeats: asyncio.Task[None] | None = None
        self._started = False
        self._stopped = False

    @property
    def rpc_addr(self) -> str:
        return self._rpc.rpc_addr

    @property
    def outbox(self) -> EventOutbox:
        return self._outbox

    def running_kernels(self) -> int:
        return sum(len(agent.running_kernels()) for agent in self.agents.values())

    def _snapshot(self) -> dict[str, list[HollowKernelRecord]]:
        return {agent_id: agent.export() for agent_id, agent in self.agents.items()}

    def _restore(self) -> int:
        """Give every agent the kernels the state file keeps for its id; how many were taken over."""
        if self.keeper is None:
            return 0
        saved = self.keeper.file.load()
        for agent_id, records in saved.items():
            agent = self.agents.get(agent_id)
            if agent is None:
                log.warning("hollow.state_of_unknown_agent", agent_id=agent_id, kernels=len(records))
            else:
                agent.restore(records)
        return self.running_kernels()

    async def start(self) -> None:
        await self._link.open(self._rpc, "the hollow fleet")
        assert self._rpc.bound_port is not None
        self.services.bind(self.config.rpc_host, self._rpc.bound_port)
        self._started = True
        taken_over = self._restore()
        if self.keeper is not None:
            self.keeper.save()
            self._link.spawn(self.keeper.run(), name="hollow-state")
        self._link.spawn(self._outbox.run(), name="hollow-outbox")
        self._link.spawn(self.interval.follow(), name="hollow-heartbeat-interval")
        self._heartbeats = self._link.spawn(self._heartbeat_loop(), name="hollow-heartbeat")
        log.info(
            "hollow.started",
            agents=len(self.agents),
            first=next(iter(self.agents)),
            rpc_addr=self.rpc_addr,
            heartbeat_interval=self.interval.source,
            agent_class=self.config.agent_class.value,
            kernels_taken_over=taken_over,
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop` is set; a `StopSignal` set by SIGTERM leaves the kernels to the next start
        (with a state file)."""
        self._link.watch(stop)
        await run_until(self, stop)

    @property
    def failure(self) -> str | None:
        """Why a background task ended the daemon, if one did."""
        return self._link.failure

    async def stop(self, detach: bool = False) -> None:
        """Stop beating, announce every agent's stop, close the RPC server, end every kernel — or,
        with `detach` and a state file, keep them in the file for the next start instead."""
        if not self._started or self._stopped:
            return
        detach = detach and self.keeper is not None
        self._stopped = True
        self._stopping.set()
        if self._heartbeats is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeats
        for agent in self.agents.values():
            self._outbox.emit(AgentStopping(agent_id=agent.agent_id, boot_id=agent.boot_id))
        await self._rpc.stop()
        kernels = self.running_kernels()
        for agent in self.agents.values():
            if detach:
                agent.detach()
            else:
                agent.shutdown()
        if not await self._outbox.drain(DRAIN_TIMEOUT):
            log.warning("hollow.events_lost_at_stop", unpublished=len(self._outbox))
        await self._link.close()
        if self.keeper is not None:
            self.keeper.save()
        left = kernels if detach else 0
        log.info(
            "hollow.stopped", agents=len(self.agents), kernels_destroyed=kernels - left, kernels_left=left
        )

    async def _heartbeat_loop(self) -> None:
        """Every agent's beats from one loop; each wake-up publishes the beats that are due."""
        loop = asyncio.get_running_loop()
        agents = list(self.agents.values())
        count, interval = len(agents), self.interval.current()
        spread = min(self.config.registration_spread, interval)
        start = loop.time()
        # (due, index): the registrations spread over `spread`, in id order.
        due: list[tuple[float, int]] = [(start + spread * i / count, i) for i in range(count)]
        while not self._stopping.is_set():
            now = loop.time()
            if self.interval.current() != interval:
                interval = self.interval.current()
                due = [(min(at, _next_beat(start + interval * i / count, interval, now)), i) for at, i in due]
                heapq.heapify(due)
            paused, health, rpc_addr = self.pauses.refresh(), self.health.current(), self.rpc_addr
            faults = self.faults.refresh()
            while due and due[0][0] <= now:
                at, i = heapq.heappop(due)
                if agents[i].agent_id not in paused:
                    agents[i].heartbeat(rpc_addr, health, faults)
                heapq.heappush(due, (_next_beat(start + interval * i / count, interval, max(at, now)), i))
            wait = min(max(due[0][0] - loop.time(), TICK), FOLLOW_STEP)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), wait)


def _next_beat(phase: float, interval: float, after: float) -> float:
    """The first time after `after` on the agent's phase.

    Beats fall on `phase + k * interval`; so after the registrations the fleet's beats are
    spread evenly over the interval, and no agent waits longer than one interval between beats
    (a loop that fell behind skips the beats it missed rather than sending them in a burst).
    """
    k = math.floor((after - phase) / interval) + 1
    beat = phase + k * interval
    # (after - phase) / interval can round down to just below a whole number, and then the beat
    # lands on `after` itself: the loop would send that agent's beat again and again without
    # yielding. (A clock of millisecond steps, uvloop's, makes that common.)
    return beat if beat > after else beat + interval
