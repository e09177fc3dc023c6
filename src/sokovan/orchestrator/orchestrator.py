"""SokovanOrchestrator: the one place where coordinators, their lanes and their handlers are listed.

Each coordinator is driven by `CoordinatorLoop`s (a short cycle when hinted, a long cycle always),
one per lane; every lane cycles under its own cluster-wide lock. The ScheduleCoordinator runs the
session handlers in four lanes (end, place, prepare, start) that cycle concurrently; retries and
maintenance are one lane each. To add a session handler, write its file and add it to a lane in
`session_lanes`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import Hint
from sokovan.bus.user_events import UserEventPublisher
from sokovan.common.rpc import AgentRPCClient
from sokovan.config.cluster import ClusterConfig
from sokovan.orchestrator.locks import CycleLock
from sokovan.orchestrator.loop import CoordinatorLoop
from sokovan.orchestrator.maintenance.coordinator import MaintenanceCoordinator
from sokovan.orchestrator.retry.engine import RetryCoordinator
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from sokovan.orchestrator.schedule.handler import SessionHandler
from sokovan.orchestrator.schedule.handlers.lifecycle.call_agents import (
    PREPARE_SESSIONS,
    START_SESSIONS,
    CallAgents,
)
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


def session_lanes(
    engine: AsyncEngine, rpc: AgentRPCClient, config: ClusterConfig | None = None
) -> dict[str, list[SessionHandler]]:
    """The session handlers, grouped into lanes that run concurrently. Within a lane, the order
    lets one cycle carry a session as far as it can go."""
    cfg = config or ClusterConfig()
    return {
        # Failures and terminations first: they free resources.
        "end": [
            PromoteSessions(DETECT_STARTUP_FAILURE),
            PromoteSessions(DETECT_TERMINATION),
            TerminateSessions(rpc, force_after=lambda: cfg.phases.terminate.timeout / 2),
            PromoteSessions(PROMOTE_TO_TERMINATED),
        ],
        "place": [ScheduleNewSessions(engine)],
        "prepare": [CallAgents(PREPARE_SESSIONS, rpc), PromoteSessions(PROMOTE_TO_PREPARED)],
        "start": [CallAgents(START_SESSIONS, rpc), PromoteSessions(PROMOTE_TO_RUNNING)],
    }


def session_handlers(engine: AsyncEngine, rpc: AgentRPCClient) -> list[SessionHandler]:
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
        retry = RetryCoordinator(engine, config, CycleLock(engine), events)
        maintenance = MaintenanceCoordinator(engine, rpc, config, CycleLock(engine), events, backlog)
        # Whatever a lane moves is the sessions' business: it hints every session lane at once.
        wake_sessions = functools.partial(self.hint, Hint.SCHEDULE)
        self.loops: dict[str, list[CoordinatorLoop]] = {
            Hint.SCHEDULE: [
                self._loop(f"{Hint.SCHEDULE}.{lane}", functools.partial(self.schedule.cycle_lane, lane))
                for lane in self.schedule.lanes
            ]
            # Retries: woken with the session lanes (a session ended), and every long cycle (a
            # scheduled retry came due).
            + [self._loop(Hint.RETRY, retry.cycle)],
            Hint.MAINTENANCE: [self._loop(Hint.MAINTENANCE, maintenance.cycle)],
        }
        for loops in self.loops.values():
            for loop in loops:
                loop.on_moved = wake_sessions

    def _loop(self, name: str, cycle: Callable[[], Awaitable[bool]]) -> CoordinatorLoop:
        return CoordinatorLoop(
            name,
            cycle,
            long_interval=lambda: self.config.loops.long_cycle_interval,
            debounce=lambda: self.config.loops.short_cycle_debounce,
        )

    def hint(self, coordinator: str) -> None:
        """Wake the loops of `coordinator` (a `Hint` value, as it arrives over Redis)."""
        for loop in self.loops.get(coordinator, []):
            loop.hint()

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.gather(*(loop.run(stop) for loops in self.loops.values() for loop in loops))
