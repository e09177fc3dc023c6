"""Routes agent events to their appliers and hints the coordinators that care."""

from __future__ import annotations

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import HintPublisher
from sokovan.common.events import KERNEL_EVENT_TYPES, AgentEvent, AgentHeartbeat, AgentStopping
from sokovan.manager.context import SCHEDULE
from sokovan.manager.repositories.agents import record_heartbeat
from sokovan.orchestrator.schedule.kernel_events import KernelEventApplier

log = structlog.get_logger(__name__)


class EventDispatcher:
    def __init__(self, engine: AsyncEngine, hints: HintPublisher) -> None:
        self._engine = engine
        self._hints = hints
        self._kernels = KernelEventApplier(engine)

    async def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, AgentHeartbeat):
            if await record_heartbeat(self._engine, event) and event.seq == 1:
                log.info("agent.registered", agent_id=event.agent_id, rpc_addr=event.rpc_addr)
                await self._hints.hint(SCHEDULE)  # new room: pending sessions may fit now
        elif isinstance(event, AgentStopping):
            log.info("agent.stopping", agent_id=event.agent_id)
        elif isinstance(event, KERNEL_EVENT_TYPES):
            if await self._kernels.apply(event):
                await self._hints.hint(SCHEDULE)
