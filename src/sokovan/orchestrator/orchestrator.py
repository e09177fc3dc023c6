"""SokovanOrchestrator: the one place where coordinators, their lanes and their handlers are listed.

Each coordinator is driven by `CoordinatorLoop`s (a short cycle when hinted, a long cycle always),
one per lane; every lane cycles under its own cluster-wide lock. The ScheduleCoordinator runs the
session handlers in four lanes (end, place, prepare, start) that cycle concurrently; the
DeploymentCoordinator (model serving) one lane, the RouteCoordinator two (replicas, health), the
NodeCoordinator (agents' lifecycle) one; retries and maintenance one each. To add a handler,
write its file and add it to a lane below.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import Hint, parse_demand
from sokovan.bus.routing import RoutingBus
from sokovan.bus.user_events import UserEventPublisher
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.task_group import run_together
from sokovan.config.cluster import ClusterConfig
from sokovan.orchestrator.deployment.coordinator import DeploymentCoordinator
from sokovan.orchestrator.deployment.handler import DeploymentHandler
from sokovan.orchestrator.deployment.handlers.autoscale_deployment import AutoscaleDeployment
from sokovan.orchestrator.deployment.handlers.check_pending_deployment import CheckPendingDeployment
from sokovan.orchestrator.deployment.handlers.check_replica_deployment import CheckReplicaDeployment
from sokovan.orchestrator.deployment.handlers.deploying_deployment import DeployingDeployment
from sokovan.orchestrator.deployment.handlers.deployment_health import DeploymentHealth
from sokovan.orchestrator.deployment.handlers.destroying_deployment import DestroyingDeployment
from sokovan.orchestrator.deployment.handlers.reconcile_deployment import ReconcileDeployment
from sokovan.orchestrator.deployment.handlers.scaling_deployment import ScalingDeployment
from sokovan.orchestrator.deployment.replicas import ReplicaSessions
from sokovan.orchestrator.locks import CycleLock, worker_name
from sokovan.orchestrator.loop import CoordinatorLoop
from sokovan.orchestrator.maintenance.coordinator import MaintenanceCoordinator
from sokovan.orchestrator.node.backlog import Backlog
from sokovan.orchestrator.node.coordinator import NodeCoordinator
from sokovan.orchestrator.node.handler import NodeHandler
from sokovan.orchestrator.node.handlers.complete_drain import CompleteDrain
from sokovan.orchestrator.node.handlers.confirm_down import ConfirmDown
from sokovan.orchestrator.node.handlers.count_agents import CountAgents
from sokovan.orchestrator.node.handlers.detect_silence import DetectSilence
from sokovan.orchestrator.node.handlers.expire_boot import ExpireBoot
from sokovan.orchestrator.node.handlers.publish_devices import PublishDevices
from sokovan.orchestrator.node.mass_silence import Holds
from sokovan.orchestrator.node.watch import Watch
from sokovan.orchestrator.retry.engine import RetryCoordinator
from sokovan.orchestrator.route.coordinator import RouteCoordinator
from sokovan.orchestrator.route.handler import RouteHandler
from sokovan.orchestrator.route.handlers.health_check_route import HealthCheckRoute
from sokovan.orchestrator.route.handlers.provisioning_route import ProvisioningRoute
from sokovan.orchestrator.route.handlers.route_eviction import RouteEviction
from sokovan.orchestrator.route.handlers.running_route import RunningRoute
from sokovan.orchestrator.route.handlers.service_discovery_sync import ServiceDiscoverySync
from sokovan.orchestrator.route.handlers.terminating_route import TerminatingRoute
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from sokovan.orchestrator.schedule.handler import SessionHandler
from sokovan.orchestrator.schedule.handlers.lifecycle.call_agents import (
    PREPARE_SESSIONS,
    START_SESSIONS,
    CallAgents,
)
from sokovan.orchestrator.schedule.handlers.lifecycle.enforce_lifetime import EnforceLifetime
from sokovan.orchestrator.schedule.handlers.lifecycle.requeue_preempted import RequeuePreempted
from sokovan.orchestrator.schedule.handlers.lifecycle.schedule_new_sessions import ScheduleNewSessions
from sokovan.orchestrator.schedule.handlers.lifecycle.terminate_sessions import TerminateSessions
from sokovan.orchestrator.schedule.handlers.promotion.promote_sessions import PromoteSessions
from sokovan.orchestrator.schedule.handlers.promotion.promotions import (
    DETECT_STARTUP_FAILURE,
    DETECT_TERMINATION,
    PROMOTE_TO_PREPARED,
    PROMOTE_TO_RUNNING,
    PROMOTE_TO_TERMINATED,
)
from sokovan.orchestrator.schedule.handoffs import lane, next_lanes
from sokovan.orchestrator.share_out import owner_index
from sokovan.state.kernel_writes import KernelMove

log = structlog.get_logger(__name__)

# The route lanes are hinted whenever replica sessions move; they coalesce those hints over this
# long, so a burst of replicas starting costs them a few cycles.
ROUTE_DEBOUNCE = 0.05

# The retry lane is hinted whenever a session ends (a dozen statements a cycle, most finding
# nothing to decide); it coalesces the ends of this long into one cycle. An end after a quiet
# spell is decided at once.
RETRY_DEBOUNCE = 0.2


def session_lanes(
    engine: AsyncEngine,
    rpc: AgentRPCClient,
    config: ClusterConfig | None = None,
    events: UserEventPublisher | None = None,
    wake: Callable[[str], None] | None = None,
) -> dict[str, list[SessionHandler]]:
    """The session handlers, grouped into lanes that run concurrently. Within a lane, the order
    lets one cycle carry a session as far as it can go. `wake(hint name)` wakes loops: the
    placement lane wakes the lanes to stop preemption victims (and publishes `session.preempted`
    on `events`), the agent calls their own lane when calls that outlasted a cycle end."""
    cfg = config or ClusterConfig()
    prepare_again = functools.partial(wake, lane("prepare")) if wake else None
    start_again = functools.partial(wake, lane("start")) if wake else None
    return {
        # Failures and terminations first: they free resources.
        "end": [
            EnforceLifetime(engine),
            PromoteSessions(DETECT_STARTUP_FAILURE),
            PromoteSessions(DETECT_TERMINATION),
            TerminateSessions(rpc, force_after=lambda: cfg.phases.terminate.timeout / 2),
            RequeuePreempted(),
            PromoteSessions(PROMOTE_TO_TERMINATED),
        ],
        "place": [
            ScheduleNewSessions(
                engine,
                events=events,
                wake=functools.partial(wake, Hint.SCHEDULE) if wake else None,
                fair_share=lambda: cfg.fair_share,
            )
        ],
        "prepare": [CallAgents(PREPARE_SESSIONS, rpc, prepare_again), PromoteSessions(PROMOTE_TO_PREPARED)],
        "start": [CallAgents(START_SESSIONS, rpc, start_again), PromoteSessions(PROMOTE_TO_RUNNING)],
    }


@dataclass(frozen=True)
class Serving:
    """What the deployment and route coordinators need besides the database: the bus the routing
    table and health reports travel on, and a way to create and end replica sessions."""

    bus: RoutingBus
    replicas: ReplicaSessions


def deployment_lanes(
    engine: AsyncEngine, events: UserEventPublisher | None, bus: RoutingBus
) -> dict[str, list[DeploymentHandler]]:
    """The autoscaler first (what it decides, the others carry out in the same cycle); the health
    judgement last, once the routes are as the others left them."""
    return {
        "deployments": [
            AutoscaleDeployment(engine, bus),
            CheckPendingDeployment(engine),
            CheckReplicaDeployment(),
            ReconcileDeployment(),
            ScalingDeployment(engine, events),
            DeployingDeployment(engine, events),
            DestroyingDeployment(engine, events),
            DeploymentHealth(),
        ]
    }


def route_lanes(engine: AsyncEngine, serving: Serving) -> dict[str, list[RouteHandler]]:
    """Creating and ending replica sessions take one call each: they have a lane of their own, so
    health checks and the routing table never wait behind a large batch of them. Ending is in the
    same lane as creating, so a route is never finished while its session is being created."""
    return {
        "replicas": [
            ProvisioningRoute(engine, serving.replicas),
            TerminatingRoute(serving.replicas, serving.bus),
        ],
        "health": [
            HealthCheckRoute(engine, serving.bus),
            RouteEviction(),
            RunningRoute(),
            ServiceDiscoverySync(engine, serving.bus),
        ],
    }


def node_lanes(
    engine: AsyncEngine,
    config: ClusterConfig,
    events: UserEventPublisher | None,
    backlog: Backlog,
    watch: Watch | None = None,
) -> dict[str, list[NodeHandler]]:
    """The node lifecycle: silence first (READY → DEGRADED → DOWN), then boots and drains.
    `watch`: whether the agents' reports reach this manager (fed by its event consumer)."""
    holds = Holds(watch)  # mass silences: ConfirmDown keeps them, the others heed them
    return {
        "nodes": [
            DetectSilence(config, backlog, holds),
            ConfirmDown(config, backlog, events, holds),
            ExpireBoot(config),
            CompleteDrain(engine, config, holds),
            CountAgents(engine),
            PublishDevices(engine),
        ]
    }


def session_handlers(engine: AsyncEngine, rpc: AgentRPCClient) -> list[SessionHandler]:
    """All session handlers in one sequence (one lane), in lane order."""
    return [h for lane in session_lanes(engine, rpc).values() for h in lane]


class SokovanOrchestrator:
    """`publish` sends a hint to every manager (`bus.hints`): how a lane held by another manager
    is woken. Without it (one manager, tests) every wake is local. `worker` (index, count): this
    process is one of the workers of `sokovan manager --workers count`; they share the lanes out
    (`locks`), so that every core orchestrates. `watch` is fed by the manager's event consumer:
    the node lane judges no agent's silence while the reports do not reach it (`node.watch`)."""

    def __init__(
        self,
        engine: AsyncEngine,
        rpc: AgentRPCClient,
        config: ClusterConfig,
        events: UserEventPublisher | None = None,
        backlog: Callable[[], Awaitable[int]] | None = None,
        serving: Serving | None = None,
        publish: Callable[[str], Awaitable[None]] | None = None,
        worker: tuple[int, int] = (0, 1),
        watch: Watch | None = None,
        manager_id: str = "",
    ) -> None:
        self.config = config
        # One set of lane locks for the whole manager: the lanes it holds, it keeps (`locks`).
        self._worker = worker
        self._manager_id = manager_id
        shared = worker[1] > 1
        self.lock = CycleLock(
            engine,
            mine=self._mine if shared else None,
            presence=worker_name(manager_id, worker[0]) if shared else None,
            owner=self._owner if shared else None,
        )
        self._publish = publish
        self._publishing: set[asyncio.Task[None]] = set()
        self.schedule = ScheduleCoordinator(
            engine, config, session_lanes(engine, rpc, config, events, self.wake), self.lock, events=events
        )
        self.schedule.next_lanes = next_lanes
        self.schedule.on_wake = self.wake
        self.schedule.run_now = self._run_now
        retry = RetryCoordinator(engine, config, self.lock, events)
        maintenance = MaintenanceCoordinator(engine, rpc, config, self.lock)
        self.nodes = NodeCoordinator(
            engine, node_lanes(engine, config, events, Backlog(backlog), watch), self.lock, events
        )
        self.nodes.on_wake = self.wake
        # What these lanes move is the sessions' business: they wake every session lane.
        wake_sessions = functools.partial(self.wake, Hint.SCHEDULE)
        self.loops: dict[str, list[CoordinatorLoop]] = {
            # A session lane that moved something runs again at once (there may be more) and
            # wakes the lanes the statuses it wrote are work for (`handoffs`).
            Hint.SCHEDULE: [
                self._loop(
                    lane(name),
                    functools.partial(self.schedule.cycle_lane, name),
                    short_cycle=functools.partial(self.schedule.cycle_lane, name, short=True),
                )
                for name in self.schedule.lanes
            ],
            # Retries: woken when sessions end (`handoffs`), and every long cycle (a scheduled
            # retry came due).
            Hint.RETRY: [self._loop(Hint.RETRY, retry.cycle, RETRY_DEBOUNCE, on_moved=wake_sessions)],
            Hint.MAINTENANCE: [self._loop(Hint.MAINTENANCE, maintenance.cycle, on_moved=wake_sessions)],
            Hint.NODE: [
                self._loop(
                    f"{Hint.NODE}.{lane}",
                    functools.partial(self.nodes.cycle_lane, lane),
                    on_moved=wake_sessions,
                )
                for lane in self.nodes.lanes
            ],
        }
        if serving is not None:
            self._add_serving(engine, events, serving)

    def _add_serving(self, engine: AsyncEngine, events: UserEventPublisher | None, serving: Serving) -> None:
        """Deployments and routes: what one moves is the other's business, and a replica session
        moving is the routes' (a replica started, or ended: the schedule coordinator wakes them)."""
        deployments = DeploymentCoordinator(
            engine, deployment_lanes(engine, events, serving.bus), self.lock, events
        )
        routes = RouteCoordinator(engine, route_lanes(engine, serving), self.lock, events)
        deployments.on_wake = routes.on_wake = self.wake
        wake_serving = functools.partial(self.wake, Hint.DEPLOYMENT, Hint.ROUTE)
        self.loops[Hint.DEPLOYMENT] = [
            self._loop(
                f"{Hint.DEPLOYMENT}.{lane}",
                functools.partial(deployments.cycle_lane, lane),
                on_moved=wake_serving,
            )
            for lane in deployments.lanes
        ]
        self.loops[Hint.ROUTE] = [
            self._loop(
                f"{Hint.ROUTE}.{lane}",
                functools.partial(routes.cycle_lane, lane),
                ROUTE_DEBOUNCE,
                on_moved=wake_serving,
            )
            for lane in routes.lanes
        ]

    def _loop(
        self,
        name: str,
        cycle: Callable[[], Awaitable[bool]],
        min_debounce: float = 0.0,
        on_moved: Callable[[], None] | None = None,
        short_cycle: Callable[[], Awaitable[bool]] | None = None,
    ) -> CoordinatorLoop:
        loop = CoordinatorLoop(
            name,
            cycle,
            long_interval=lambda: self.config.loops.long_cycle_interval,
            debounce=lambda: max(self.config.loops.short_cycle_debounce, min_debounce),
            short_cycle=short_cycle,
        )
        if on_moved is not None:
            loop.on_moved = on_moved
        loop.held = functools.partial(self.lock.holds, name)  # its cycles are counted only then
        return loop

    def _owner_index(self, name: str) -> int | None:
        """The worker whose lane `name` is by the share-out (`share_out`)."""
        lanes = (loop.name for loops in self.loops.values() for loop in loops)
        return owner_index(lanes, name, self._worker[1])

    def _mine(self, name: str) -> bool:
        """Whether lane `name` is this worker's by the share-out."""
        return self._owner_index(name) == self._worker[0]

    def _owner(self, name: str) -> str | None:
        """The presence lock's name of the worker whose lane `name` is."""
        index = self._owner_index(name)
        return None if index is None else worker_name(self._manager_id, index)

    def _named(self, name: str) -> list[CoordinatorLoop]:
        """The loops a hint name stands for: a coordinator's (e.g. `schedule`) or one lane's
        (e.g. `schedule.place`)."""
        coordinator, _, _ = name.partition(".")
        return [loop for loop in self.loops.get(coordinator, []) if name in (coordinator, loop.name)]

    async def _run_now(self, name: str, work: Callable[[], Awaitable[bool]]) -> bool | None:
        """`CoordinatorLoop.run_now` of lane `name`'s loop (None: no such loop here)."""
        return await loops[0].run_now(work) if len(loops := self._named(name)) == 1 else None

    def hint(self, *names: str) -> None:
        """Wake this manager's loops for each of `names` (as hints arrive over Redis; a name may
        carry the demand-only suffix, `bus.hints.DEMAND`)."""
        for name in names:
            named, demand = parse_demand(name)
            for loop in self._named(named):
                loop.hint(demand=demand)

    def wake(self, *names: str) -> None:
        """Wake the loops for each of `names` wherever they run: here when this manager holds
        their lanes, else through a hint to every manager."""
        for name in names:
            loops = self._named(name)
            if self._publish is None or all(self.lock.holds(loop.name) for loop in loops):
                for loop in loops:
                    loop.hint()
                continue
            for loop in loops:
                if self.lock.holds(loop.name):
                    loop.hint()
            task = asyncio.get_running_loop().create_task(self._send(name))
            self._publishing.add(task)
            task.add_done_callback(self._publishing.discard)

    async def _send(self, name: str) -> None:
        assert self._publish is not None
        try:
            await self._publish(name)
        except Exception:  # a lost hint costs one long-cycle interval
            log.warning("could not publish a hint", hint=name, exc_info=True)

    async def follow_kernels(self, moves: Sequence[KernelMove]) -> None:
        """Agents' kernel events were applied: move their sessions on now (`event_promotions`)."""
        await self.schedule.follow_kernels(moves)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            # One group: a loop that raises ends the others too, so a restart starts one set.
            await run_together(
                (f"orchestrator.{loop.name}", loop.run(stop))
                for loops in self.loops.values()
                for loop in loops
            )
        finally:
            with contextlib.suppress(Exception):
                await self.lock.release_all()
