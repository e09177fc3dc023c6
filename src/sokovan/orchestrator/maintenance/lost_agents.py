"""Agents that stopped heartbeating: DOWN, and their kernels fail with AGENT_TRANSIENT.

This is the minimal piece of the node lifecycle that sessions need in order never to hang on a
dead agent; a heartbeat from it again makes it READY (the heartbeat upsert does that)."""

from __future__ import annotations

import datetime as dt

import structlog
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.user_events import UserEvent, UserEventPublisher, publish
from sokovan.common.types import AgentStatus, FailureCause, KernelStatus
from sokovan.db.models import Agent, Kernel
from sokovan.state.kernel_writes import KernelTransition, apply_kernel_transitions

log = structlog.get_logger(__name__)
_HELD_ON = [AgentStatus.READY.value, AgentStatus.DEGRADED.value]
# More unread agent events than this and agents are not judged silent (about one read batch).
BACKLOG_LIMIT = 1000


class LostAgentSweeper:
    def __init__(self, engine: AsyncEngine, events: UserEventPublisher | None = None) -> None:
        self._engine = engine
        self._events = events

    async def run(self, lost_timeout: float, backlog: int = 0) -> list[str]:
        """Returns the agents found lost in this run.

        `backlog` is how many agent events the managers have not read yet. Heartbeats travel with
        them, so while managers lag, an agent's silence may be our own delay: no agent is judged
        then (it will be on a later cycle, once the backlog is read)."""
        if backlog > BACKLOG_LIMIT:
            log.warning("agents.lost_check_deferred", backlog=backlog)
            return []
        now = dt.datetime.now(dt.UTC)
        async with self._engine.begin() as conn:
            # Claimed in id order, skipping rows a heartbeat is writing right now (that agent is alive).
            candidates = (
                select(Agent.id)
                .where(
                    Agent.status.in_(_HELD_ON),
                    Agent.last_heartbeat_at < now - dt.timedelta(seconds=lost_timeout),
                )
                .order_by(Agent.id)
                .with_for_update(skip_locked=True)
            )
            lost = list(
                (
                    await conn.execute(
                        update(Agent)
                        .where(Agent.id.in_(candidates.scalar_subquery()))
                        .values(status=AgentStatus.DOWN.value, status_changed_at=now)
                        .returning(Agent.id)
                    )
                ).scalars()
            )
            if not lost:
                return []
            live = [s.value for s in KernelStatus.non_terminal() - {KernelStatus.PENDING}]
            kernels = (
                await conn.execute(
                    select(Kernel.id, Kernel.agent_id).where(
                        Kernel.agent_id.in_(lost), Kernel.status.in_(live)
                    )
                )
            ).all()
            transitions = [
                KernelTransition(
                    kernel_id=k.id,
                    expected=KernelStatus.non_terminal(),
                    to_status=KernelStatus.ERROR,
                    source="maintenance.lost_agent",
                    agent_id=k.agent_id,
                    status_info={
                        "cause": FailureCause.AGENT_TRANSIENT.value,
                        "message": f"agent {k.agent_id} stopped answering",
                    },
                    message=f"agent {k.agent_id} stopped answering",
                )
                for k in kernels
            ]
            moved = await apply_kernel_transitions(conn, transitions)
        await publish(
            self._events,
            [UserEvent(name="agent.status", agent_id=a, to_status=AgentStatus.DOWN.value) for a in lost]
            + [m.event() for m in moved],
        )
        log.warning("agents.lost", agents=lost, kernels_failed=len(transitions))
        return lost
