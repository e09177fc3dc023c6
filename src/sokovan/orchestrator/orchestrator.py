"""SokovanOrchestrator: owns the coordinators and their loops.

The ScheduleCoordinator runs the session handlers in four lanes (end, place, prepare, start)
that cycle concurrently, each under its own cluster-wide lock. Deployment and Route
coordinators join as registrations on the same loop machinery when their issue lands.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.user_events import UserEventPublisher
from sokovan.common.rpc import AgentRPCClient
from sokovan.config.cluster import ClusterConfig
from sokovan.orchestrator.locks import CycleLock
from sokovan.orchestrator.loop import CoordinatorLoop
from sokovan.orchestrator.maintenance.coordinator import MaintenanceCoordinator
from sokovan.orchestrator.retry.engine import RetryCoordinator
from sokovan.orchestrator.schedule.coordinator import Handler, ScheduleCoordinator
from sokovan.orchestrator.schedule.handlers.lifecycle.prepare_sessions import PrepareSessions
from sokovan.orchestrator.schedule.handlers.lifecycle.schedule_new_sessions import ScheduleNewSessions
from sokovan.orchestrator.schedule.handlers.lifecycle.start_sessions import StartSessions
from sokovan.orchestrator.schedule.handlers.lifecycle.terminate_sessions import TerminateSessions
from sokovan.orchestrator.schedule.handlers.promotion.detect_startup_failure import DetectStartupFailure
from sokovan.orchestrator.schedule.handlers.promotion.detect_termination import DetectTermination
from sokovan.orchestrator.schedule.handlers.promotion.promote_to_prepared import PromoteToPrepared
from sokovan.orchestrator.schedule.handlers.promotion.promote_to_running import PromoteToRunning
from sokovan.orchestrator.schedule.handlers.promotion.promote_to_terminated import PromoteToTerminated


def session_lanes(
    engine: AsyncEngine, rpc: AgentRPCClient, config: ClusterConfig | None = None
) -> dict[str, list[Handler]]:
    """The session handlers, grouped into lanes that run concurrently. Within a lane, the order
    lets one cycle carry a session as far as it can go."""
    return {
        # Failures and terminations first: they free resources.
        "end": [
            DetectStartupFailure(),
            DetectTermination(),
            TerminateSessions(
                rpc, force_after=lambda: (config or ClusterConfig()).phases.terminate.timeout / 2
            ),
            PromoteToTerminated(),
        ],
        "place": [ScheduleNewSessions(engine)],
        "prepare": [PrepareSessions(rpc), PromoteToPrepared()],
        "start": [StartSessions(rpc), PromoteToRunning()],
    }


def session_handlers(engine: AsyncEngine, rpc: AgentRPCClient) -> list[Handler]:
    """All session handlers in one sequence (one lane), in lane order."""
    return [h for lane in session_lanes(engine, rpc).values() for h in lane]


class SokovanOrchestrator:
    def __init__(
        self,
        engine: AsyncEngine,
        rpc: AgentRPCClient,
        config: ClusterConfig,
        events: UserEventPublisher | None = None,
        backlog: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        self.config = config
        self.schedule = ScheduleCoordinator(
            engine, config, session_lanes(engine, rpc, config), CycleLock(engine), events=events
        )
        self.loops: dict[str, list[CoordinatorLoop]] = {
            ScheduleCoordinator.name: [
                CoordinatorLoop(
                    f"{ScheduleCoordinator.name}.{lane}",
                    functools.partial(self.schedule.cycle_lane, lane),
                    long_interval=lambda: config.loops.long_cycle_interval,
                    debounce=lambda: config.loops.short_cycle_debounce,
                    # A lane that moved sessions hands them to the other lanes at once.
                    on_moved=functools.partial(self.hint, ScheduleCoordinator.name),
                )
                for lane in self.schedule.lanes
            ]
            + [
                # Retries: woken with the session lanes (a session ended), and every long cycle
                # (a scheduled retry came due).
                CoordinatorLoop(
                    RetryCoordinator.name,
                    RetryCoordinator(engine, config, CycleLock(engine), events).cycle,
                    long_interval=lambda: config.loops.long_cycle_interval,
                    debounce=lambda: config.loops.short_cycle_debounce,
                    on_moved=functools.partial(self.hint, ScheduleCoordinator.name),
                )
            ],
            MaintenanceCoordinator.name: [
                CoordinatorLoop(
                    MaintenanceCoordinator.name,
                    MaintenanceCoordinator(engine, rpc, config, CycleLock(engine), events, backlog).cycle,
                    long_interval=lambda: config.loops.long_cycle_interval,
                    # What it changed (failed kernels, repaired leaks) is the sessions' business.
                    on_moved=functools.partial(self.hint, ScheduleCoordinator.name),
                )
            ],
        }

    def hint(self, coordinator: str) -> None:
        for loop in self.loops.get(coordinator, []):
            loop.hint()

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.gather(*(loop.run(stop) for loops in self.loops.values() for loop in loops))
