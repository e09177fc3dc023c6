"""Routes a batch of agent events to their appliers and hints the coordinators that care."""

from __future__ import annotations

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import Hint, HintPublisher
from sokovan.bus.user_events import UserEventPublisher, publish
from sokovan.common.events import KERNEL_EVENT_TYPES, AgentEvent, AgentHeartbeat, AgentStopping
from sokovan.common.metrics import EVENTS_CONSUMED
from sokovan.manager.repositories.agents import record_heartbeats
from sokovan.state.kernel_events import KernelEvent, KernelEventApplier

log = structlog.get_logger(__name__)


class EventDispatcher:
    def __init__(
        self, engine: AsyncEngine, hints: HintPublisher, events: UserEventPublisher | None = None
    ) -> None:
        self._engine = engine
        self._hints = hints
        self._events = events
        self._kernels = KernelEventApplier(engine)

    async def __call__(self, events: list[AgentEvent]) -> None:
        for event in events:
            EVENTS_CONSUMED.labels(name=event.name).inc()
        beats = [e for e in events if isinstance(e, AgentHeartbeat)]
        kernel_events: list[KernelEvent] = [e for e in events if isinstance(e, KERNEL_EVENT_TYPES)]
        hint = False
        if beats:
            recorded = await record_heartbeats(self._engine, beats)
            if recorded.ready:
                log.info("agent.ready", agents=len(recorded.ready), first=recorded.ready[0])
                hint = True  # new room: pending sessions may fit now
            await publish(self._events, recorded.events)
        for event in events:
            if isinstance(event, AgentStopping):
                log.info("agent.stopping", agent_id=event.agent_id)
        if kernel_events:
            moved = await self._kernels.apply_many(kernel_events)
            if moved:
                hint = True
                await publish(self._events, [m.event() for m in moved])
        if hint:
            await self._hints.hint(Hint.SCHEDULE)
