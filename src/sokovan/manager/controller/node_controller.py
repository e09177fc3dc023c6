"""NodeController: the API's way to apply an operator's action to an agent (seed 002's drain,
undrain, disable, enable; what each may do is `node_rules`).

Each action reads the agent, plans its step and writes it in ONE transaction: the agent's move
through the guarded `apply_agent_transitions` (history with the operator as actor; a move to DOWN
ends the agent's kernels), for an urgent drain the guarded TERMINATING move of every session that
has a live kernel on the agent (cause NODE_DRAINED: retry-eligible, so native retry runs it again
elsewhere), and an audit row. A step that leaves the status as it is (an urgent drain of a
DRAINING agent, a disable of a DOWN one) is a guarded update of its own, with its history row.
When the agent moved between the read and the write, the action is planned once more from what
is there now, then refused. After commit the events go out and the schedule coordinator is
hinted (pending sessions re-evaluate against the changed fleet), after a drain the node lanes too
(an agent with nothing left on it is DRAINED at once).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.bus.hints import Hint
from sokovan.bus.user_events import UserEvent, UserEventPublisher, publish
from sokovan.common.metrics import AGENT_DRAINS
from sokovan.common.types import AgentStatus, FailureCause, KernelStatus, SchedulingResult, SessionStatus
from sokovan.db.models import Agent, AgentHistory, Kernel, Session
from sokovan.manager.context import ManagerContext
from sokovan.manager.controller.errors import NotFound
from sokovan.manager.controller.node_rules import AgentStateConflict, NodeAction, Step, plan
from sokovan.manager.controller.scheduling_controller import STARTED
from sokovan.manager.repositories.admin import audit
from sokovan.manager.repositories.tenancy import Principal
from sokovan.state.agent_writes import AgentTransition, apply_agent_transitions, history_row
from sokovan.state.session_writes import (
    AppliedTransitions,
    SessionTransition,
    apply_session_transitions,
)

log = structlog.get_logger(__name__)

_LIVE_KERNELS = [s.value for s in KernelStatus.non_terminal()]
_STARTED = [s.value for s in STARTED]


@dataclass(frozen=True)
class NodeRequest:
    """An operator's action on one agent; `reason` is what they gave (None: none)."""

    action: NodeAction
    reason: str | None = None
    urgent: bool = False

    @property
    def handler(self) -> str:
        return f"api.{self.action.value}"

    def why(self, actor: str) -> str:
        """The reason the agent's history and status_info show."""
        what = "urgent drain" if self.urgent else self.action.value
        return self.reason or f"{what} by {actor}"


class NodeController:
    def __init__(self, ctx: ManagerContext) -> None:
        self._ctx = ctx
        self._events = UserEventPublisher(ctx.redis, ctx.settings.etcd_prefix)

    async def act(self, principal: Principal, agent_id: str, request: NodeRequest) -> None:
        """Apply `request` to the agent: NotFound, AgentStateConflict, or done (and committed)."""
        for _ in range(2):  # the agent moved between our read and our write: plan again once
            async with self._ctx.engine.begin() as conn:
                events = await self._attempt(conn, principal, agent_id, request)
            if events is not None:
                if request.action == NodeAction.DRAIN:
                    AGENT_DRAINS.labels(urgent=str(request.urgent).lower()).inc()
                await publish(self._events, events)
                # Pending sessions re-evaluate against the changed fleet; a drained agent's node
                # lane sees at once whether anything is left on it.
                await self._hint(Hint.SCHEDULE, *([Hint.NODE] if request.action == NodeAction.DRAIN else []))
                return
        async with self._ctx.engine.connect() as conn:
            status = await _status(conn, agent_id)
        raise AgentStateConflict(
            f"agent {agent_id} changed status while {request.action.value} was applied; it is now "
            f"{status.value}",
            status,
        )

    async def _attempt(
        self, conn: AsyncConnection, principal: Principal, agent_id: str, request: NodeRequest
    ) -> list[UserEvent] | None:
        """The action in `conn`'s transaction: the events to publish, or None when it was stale."""
        row = (await conn.execute(select(Agent.status, Agent.disabled).where(Agent.id == agent_id))).first()
        if row is None:
            raise NotFound(f"agent {agent_id} not found")
        status = AgentStatus(row.status)
        step = plan(agent_id, request.action, status, disabled=row.disabled, urgent=request.urgent)
        actor, why = principal.access_key, request.why(principal.access_key)
        events: list[UserEvent] = []
        if step.target is not None:
            applied = await apply_agent_transitions(
                conn,
                [
                    AgentTransition(
                        agent_id=agent_id,
                        expected=frozenset({status.value}),
                        to_status=step.target,
                        handler=request.handler,
                        reason=why,
                        actor=actor,
                        values=step.values,
                    )
                ],
            )
            if applied.stale:
                return None
            events += applied.events
        elif not await _hold(conn, agent_id, status, row.disabled, step, request.handler, why, actor):
            return None
        detail: dict[str, Any] = {"reason": request.reason}
        if request.action == NodeAction.DRAIN:
            detail["urgent"] = request.urgent
        if step.end_sessions:
            ended = await _end_sessions(
                conn, agent_id, request.handler, f"agent {agent_id} was drained urgently: {why}"
            )
            detail["sessions_terminated"] = len(ended.moved)
            events += ended.events()
        await audit(conn, actor, f"agent.{request.action.value}", agent_id, detail)
        return events

    async def _hint(self, *hints: Hint) -> None:
        for hint in hints:
            try:
                await self._ctx.hints.hint(hint)
            except Exception:  # a lost hint costs one long-cycle interval, never the request
                log.warning("could not publish a hint", hint=hint.value, exc_info=True)


async def _status(conn: AsyncConnection, agent_id: str) -> AgentStatus:
    found = (await conn.execute(select(Agent.status).where(Agent.id == agent_id))).scalar_one_or_none()
    if found is None:
        raise NotFound(f"agent {agent_id} not found")
    return AgentStatus(found)


async def _hold(
    conn: AsyncConnection,
    agent_id: str,
    status: AgentStatus,
    disabled: bool,
    step: Step,
    handler: str,
    reason: str,
    actor: str,
) -> bool:
    """A step that keeps the agent's status: guarded on the status and `disabled` it was read
    with, its values and status_info written and a history row (from = to) added. False: stale."""
    values: Mapping[str, Any] = step.values
    done = (
        await conn.execute(
            update(Agent)
            .where(Agent.id == agent_id, Agent.status == status.value, Agent.disabled.is_(disabled))
            .values(status_info={"reason": reason, "handler": handler, "by": actor}, **dict(values))
            .returning(Agent.id)
        )
    ).first()
    if done is None:
        return False
    now = dt.datetime.now(dt.UTC)
    await conn.execute(
        insert(AgentHistory).values(history_row(agent_id, handler, status, status, reason, actor, now))
    )
    return True


async def _end_sessions(
    conn: AsyncConnection, agent_id: str, handler: str, message: str
) -> AppliedTransitions:
    """Every started session with a live kernel on the agent → TERMINATING, cause NODE_DRAINED
    (no result: the session ends ERROR/FAILURE, which native retry takes up)."""
    session_ids = (
        (
            await conn.execute(
                select(Kernel.session_id)
                .join(Session, Session.id == Kernel.session_id)
                .where(
                    Kernel.agent_id == agent_id,
                    Kernel.status.in_(_LIVE_KERNELS),
                    Session.status.in_(_STARTED),
                )
                .distinct()
                .order_by(Kernel.session_id)
            )
        )
        .scalars()
        .all()
    )
    return await apply_session_transitions(
        conn,
        [
            SessionTransition(
                session_id=sid,
                expected=STARTED,
                to_status=SessionStatus.TERMINATING,
                handler=handler,
                result=SchedulingResult.SUCCESS,
                status_info={"cause": FailureCause.NODE_DRAINED.value, "message": message},
                session_result=None,
                message=message,
            )
            for sid in session_ids
        ],
    )


__all__ = ["NodeController", "NodeRequest"]
