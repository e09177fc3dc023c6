"""Routes a batch of agent events to their appliers and hints the coordinators that care.

With `follow` (the orchestrator's `follow_kernels`), the sessions whose kernels moved are promoted
right after the events are applied (e.g. CREATING → RUNNING once the last kernel runs), and the
lanes that pick the sessions up next are woken; without it, or when it fails, the schedule lanes are hinted
and their promotion handlers do it on their next cycle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import Hint, HintPublisher
from sokovan.bus.user_events import UserEventPublisher, publish
from sokovan.common.events import KERNEL_EVENT_TYPES, AgentEvent, AgentHeartbeat, AgentStopping
from sokovan.common.metrics import EVENTS_CONSUMED
from sokovan.manager.repositories.agents import record_heartbeats
from sokovan.orchestrator.schedule.handoffs import PLACE
from sokovan.state.kernel_events import KernelEvent, KernelEventApplier
from sokovan.state.kernel_writes import KernelMove

log = structlog.get_logger(__name__)

Follow = Callable[[Sequence[KernelMove]], Awaitable[None]]


class EventDispatcher:
    def __init__(
        self,
        engine: AsyncEngine,
        hints: HintPublisher,
        events: UserEventPublisher | None = None,
        follow: Follow | None = None,
    ) -> None:
        self._engine = engine
        self._hints = hints
        self._events = events
        self._follow = follow
        self._kernels = KernelEventApplier(engine)

    async def __call__(self, events: list[AgentEvent]) -> None:
        for event in events:
            EVENTS_CONSUMED.labels(name=event.name).inc()
        beats = [e for e in events if isinstance(e, AgentHeartbeat)]
        kernel_events: list[KernelEvent] = [e for e in events if isinstance(e, KERNEL_EVENT_TYPES)]
        hint: str | None = None
        # Kernel events first: their sessions wait on them (and on the promotions they complete),
        # while a heartbeat only refreshes what the agent's row already says.
        if kernel_events:
            moved = await self._kernels.apply_many(kernel_events)
            if moved:
                await publish(self._events, [m.event() for m in moved])
                if not await self._followed(moved):
                    hint = Hint.SCHEDULE
        if beats:
            recorded = await record_heartbeats(self._engine, beats)
            if recorded.ready:
                for agent_id in recorded.ready:
                    log.info("agent.ready", agent_id=agent_id)
                hint = hint or PLACE  # new room: pending sessions may fit now
            await publish(self._events, recorded.events)
        for event in events:
            if isinstance(event, AgentStopping):
                log.info("agent.stopping", agent_id=event.agent_id)
        if hint is not None:
            await self._hints.hint(hint)

    async def _followed(self, moved: list[KernelMove]) -> bool:
        if self._follow is None:
            return False
        try:
            await self._follow(moved)
        except Exception:  # the lanes' own promotion handlers will do it
            log.warning("event.follow_failed", kernels=len(moved), exc_info=True)
            return False
        return True
