"""SokovanOrchestrator: owns the coordinators and their loops.

The ScheduleCoordinator runs the session handlers in an order that lets one cycle carry a
session as far as it can go: failures and terminations first (they free resources), then
placement, preparation and start. Deployment and Route coordinators join as registrations
on the same loop machinery when their issue lands.
"""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.rpc import AgentRPCClient
from sokovan.config.cluster import ClusterConfig
from sokovan.orchestrator.locks import CycleLock
from sokovan.orchestrator.loop import CoordinatorLoop
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


def session_handlers(engine: AsyncEngine, rpc: AgentRPCClient) -> list[Handler]:
    return [
        DetectStartupFailure(),
        DetectTermination(),
        TerminateSessions(rpc),
        PromoteToTerminated(),
        ScheduleNewSessions(engine),
        PrepareSessions(rpc),
        PromoteToPrepared(),
        StartSessions(rpc),
        PromoteToRunning(),
    ]


class SokovanOrchestrator:
    def __init__(self, engine: AsyncEngine, rpc: AgentRPCClient, config: ClusterConfig) -> None:
        self.config = config
        self.schedule = ScheduleCoordinator(engine, config, session_handlers(engine, rpc), CycleLock(engine))
        self.loops = {
            ScheduleCoordinator.name: CoordinatorLoop(
                ScheduleCoordinator.name,
                self.schedule.cycle,
                long_interval=lambda: config.loops.long_cycle_interval,
                debounce=lambda: config.loops.short_cycle_debounce,
            )
        }

    def hint(self, coordinator: str) -> None:
        loop = self.loops.get(coordinator)
        if loop is not None:
            loop.hint()

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.gather(*(loop.run(stop) for loop in self.loops.values()))
