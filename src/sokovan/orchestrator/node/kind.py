"""Agents as an entity of the coordinator spine: their rows, verdicts turned into guarded
transitions, and the writes (`state.agent_writes`: history, events, a DOWN agent's kernels)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.bus.hints import Hint
from sokovan.common.metrics import AGENT_TRANSITIONS
from sokovan.db.models import Agent
from sokovan.orchestrator.node.handler import AgentRow, NodeHandler, NodeResult
from sokovan.orchestrator.spine.coordinator import Applied
from sokovan.state.agent_writes import AgentTransition, apply_agent_transitions


@dataclass(frozen=True)
class NodeChange:
    transition: AgentTransition


class NodeKind:
    entity = "agent"

    async def load(self, conn: AsyncConnection, handler: NodeHandler, now: dt.datetime) -> Sequence[AgentRow]:
        statuses = handler.reads if handler.reads is not None else handler.targets
        if not statuses:
            return []
        query = select(
            Agent.id,
            Agent.status,
            Agent.scaling_group,
            Agent.agent_class,
            Agent.last_heartbeat_at,
            Agent.status_changed_at,
        ).where(Agent.status.in_(sorted(s.value for s in statuses)))
        narrower = handler.narrow(now)
        if narrower is not None:
            query = query.where(narrower)
        rows = await conn.execute(query.order_by(Agent.id))
        return [AgentRow(*r) for r in rows]

    def judge(
        self, handler: NodeHandler, result: NodeResult, rows: Sequence[AgentRow], now: dt.datetime
    ) -> list[NodeChange]:
        if handler.moves_to is None:
            return []
        by_id = {r.id: r for r in rows}
        changes = []
        for agent_id, verdict in result.moves.items():
            row = by_id.get(agent_id)
            if row is None or row.status not in handler.targets:
                continue
            transition = AgentTransition(
                agent_id=agent_id,
                expected=frozenset({row.status}),
                to_status=handler.moves_to,
                handler=handler.name,
                reason=verdict.reason,
                end_kernels=verdict.end_kernels,
                seen_heartbeat=row.last_heartbeat_at,
            )
            changes.append(NodeChange(transition))
        return changes

    def one_statement(self, changes: Sequence[NodeChange]) -> bool:
        return False

    async def write(self, conn: AsyncConnection, changes: Sequence[NodeChange]) -> Applied:
        applied = await apply_agent_transitions(conn, [c.transition for c in changes])
        # Agents leaving placement or ending kernels are the sessions' business.
        wake = frozenset({Hint.SCHEDULE.value}) if applied.moved else frozenset()
        return Applied(
            moved=applied.moved, events=applied.events, changed=applied.kernels_ended > 0, wake=wake
        )

    def outcome(self, change: NodeChange) -> tuple[str, str]:
        return change.transition.handler, "SUCCESS"

    def count_move(self, src: str, dst: str) -> None:
        AGENT_TRANSITIONS.labels(from_status=src, to_status=dst).inc()
