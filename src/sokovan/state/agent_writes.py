"""Guarded agent status writes (node lifecycle, seed 002), with their history, in the caller's
transaction.

The same rule as for sessions: an agent moves only while it is still in a status the caller
expected (compare-and-set under a row lock, rows locked in id order); one that moved on meanwhile
is stale and left alone. Each move gets an `agent_history` row (what moved it, from → to, why, who)
and an `agent.status` event. A move to DOWN, whoever makes it (a grace that ran out, an operator's
disable), ends the agent's live kernels with AGENT_TRANSIENT in the same transaction, so native
retry can place their sessions elsewhere; a transition may ask for the same on another move
(a draining agent silent for good).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.bus.user_events import UserEvent
from sokovan.common.types import AgentStatus, FailureCause, KernelStatus
from sokovan.db.among import among
from sokovan.db.models import Agent, AgentHistory, Kernel
from sokovan.state.kernel_writes import KernelMove, KernelTransition, apply_kernel_transitions

# Statuses in which an agent's kernel is live on it (PENDING kernels are not started anywhere yet).
_LIVE_ON_AGENT = [s.value for s in KernelStatus.non_terminal() - {KernelStatus.PENDING}]


@dataclass(frozen=True)
class AgentTransition:
    """Move `agent_id` to `to_status` if it is still in `expected`.

    `values` are other columns written with the move (e.g. `disabled`); `end_kernels` ends the
    agent's live kernels with AGENT_TRANSIENT (always done for a move to DOWN). A judgement of
    silence names the last heartbeat it saw (`seen_heartbeat`): if the agent beat since, the
    transition is stale."""

    agent_id: str
    expected: frozenset[str]
    to_status: AgentStatus
    handler: str
    reason: str
    actor: str | None = None
    values: Mapping[str, Any] = field(default_factory=dict)
    end_kernels: bool = False
    seen_heartbeat: dt.datetime | None = None

    @property
    def ends_kernels(self) -> bool:
        return self.end_kernels or self.to_status == AgentStatus.DOWN


@dataclass
class AgentApplied:
    """Agents moved (id → (from, to)), stale transitions, and the events users see (the agents'
    and their ended kernels')."""

    moved: dict[str, tuple[str, str]] = field(default_factory=dict)
    stale: list[str] = field(default_factory=list)
    events: list[UserEvent] = field(default_factory=list)
    kernels_ended: int = 0


def agent_event(agent_id: str, src: str | None, dst: str, reason: str, actor: str | None) -> UserEvent:
    detail: dict[str, object] = {"reason": reason}
    if actor is not None:
        detail["by"] = actor
    return UserEvent(name="agent.status", agent_id=agent_id, from_status=src, to_status=dst, detail=detail)


def history_row(
    agent_id: str, handler: str, src: str | None, dst: str, reason: str, actor: str | None, now: dt.datetime
) -> dict[str, Any]:
    return {
        "agent_id": agent_id,
        "handler": handler,
        "result": "SUCCESS",
        "from_status": src,
        "to_status": dst,
        "message": reason,
        "actor": actor,
        "created_at": now,
    }


async def apply_agent_transitions(
    conn: AsyncConnection, transitions: Sequence[AgentTransition], now: dt.datetime | None = None
) -> AgentApplied:
    out = AgentApplied()
    if not transitions:
        return out
    now = now or dt.datetime.now(dt.UTC)
    rows = await conn.execute(
        select(Agent.id, Agent.status, Agent.last_heartbeat_at)
        .where(among(Agent.id, {t.agent_id for t in transitions}))
        .order_by(Agent.id)
        .with_for_update()
    )
    current: dict[str, str] = {}
    beats: dict[str, dt.datetime | None] = {}
    for r in rows:
        current[r.id], beats[r.id] = str(r.status), r.last_heartbeat_at
    history: list[dict[str, Any]] = []
    ending: dict[str, str] = {}
    for t in transitions:
        status = current.get(t.agent_id)
        if status is None or status not in t.expected or _beat_since(t, beats.get(t.agent_id)):
            out.stale.append(t.agent_id)
            continue
        target = t.to_status.value
        info: dict[str, Any] = {"reason": t.reason, "handler": t.handler}
        if t.actor is not None:
            info["by"] = t.actor
        await conn.execute(
            update(Agent)
            .where(Agent.id == t.agent_id)
            .values(status=target, status_changed_at=now, status_info=info, **dict(t.values))
        )
        history.append(history_row(t.agent_id, t.handler, status, target, t.reason, t.actor, now))
        out.moved[t.agent_id] = (out.moved.get(t.agent_id, (status, target))[0], target)
        out.events.append(agent_event(t.agent_id, status, target, t.reason, t.actor))
        current[t.agent_id] = target
        if t.ends_kernels:
            ending[t.agent_id] = t.reason
    if history:
        await conn.execute(insert(AgentHistory), history)
    if ending:
        ended = await end_agent_kernels(conn, ending)
        out.kernels_ended = len(ended)
        out.events.extend(m.event() for m in ended)
    return out


def _beat_since(t: AgentTransition, last: dt.datetime | None) -> bool:
    return t.seen_heartbeat is not None and last is not None and last > t.seen_heartbeat


async def end_agent_kernels(conn: AsyncConnection, reasons: Mapping[str, str]) -> list[KernelMove]:
    """End the live kernels of the agents in `reasons` (agent id → why) with AGENT_TRANSIENT.

    Returns the kernels' applied moves (their `.event()` is what users see)."""
    kernels = (
        await conn.execute(
            select(Kernel.id, Kernel.agent_id)
            .where(Kernel.agent_id.in_(list(reasons)), Kernel.status.in_(_LIVE_ON_AGENT))
            .order_by(Kernel.id)
        )
    ).all()
    transitions = [
        KernelTransition(
            kernel_id=k.id,
            expected=KernelStatus.non_terminal(),
            to_status=KernelStatus.ERROR,
            source="node_lifecycle",
            agent_id=k.agent_id,
            status_info={
                "cause": FailureCause.AGENT_TRANSIENT.value,
                "message": f"agent {k.agent_id}: {reasons[k.agent_id]}",
            },
            message=f"agent {k.agent_id}: {reasons[k.agent_id]}",
        )
        for k in kernels
    ]
    return await apply_kernel_transitions(conn, transitions)


__all__ = [
    "AgentApplied",
    "AgentTransition",
    "agent_event",
    "apply_agent_transitions",
    "end_agent_kernels",
    "history_row",
]
