"""Agents as the manager learns them from heartbeats."""

from __future__ import annotations

import datetime as dt

import structlog
from sqlalchemy import case, or_, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.events import AgentHeartbeat
from sokovan.common.types import AgentStatus
from sokovan.db.models import Agent, ScalingGroup

log = structlog.get_logger(__name__)

# Operator-held states a heartbeat does not undo.
_HELD = [AgentStatus.DRAINING.value, AgentStatus.DRAINED.value, AgentStatus.FAILED.value]


async def record_heartbeat(engine: AsyncEngine, hb: AgentHeartbeat) -> bool:
    """Register or refresh an agent; a beat older than the last one seen is ignored.

    Returns False when the beat was ignored (stale, or its scaling group does not exist).
    """
    now = dt.datetime.now(dt.UTC)
    async with engine.begin() as conn:
        sg = await conn.scalar(select(ScalingGroup.name).where(ScalingGroup.name == hb.scaling_group))
        if sg is None:
            log.warning("agent.unknown_scaling_group", agent_id=hb.agent_id, scaling_group=hb.scaling_group)
            return False
        values = {
            "id": hb.agent_id,
            "status": AgentStatus.READY.value,
            "scaling_group": hb.scaling_group,
            "available_slots": hb.available_slots,
            "rpc_addr": hb.rpc_addr,
            "images": sorted(hb.images),
            "boot_id": hb.boot_id,
            "heartbeat_seq": hb.seq,
            "last_heartbeat_at": now,
        }
        stmt = insert(Agent).values(**values)
        excluded = stmt.excluded
        fresh = or_(Agent.boot_id != excluded.boot_id, Agent.heartbeat_seq < excluded.heartbeat_seq)
        upsert = stmt.on_conflict_do_update(
            index_elements=[Agent.id],
            set_={
                "scaling_group": excluded.scaling_group,
                "available_slots": excluded.available_slots,
                "rpc_addr": excluded.rpc_addr,
                "images": excluded.images,
                "boot_id": excluded.boot_id,
                "heartbeat_seq": excluded.heartbeat_seq,
                "last_heartbeat_at": excluded.last_heartbeat_at,
                "status": _keep_held(excluded.status),
            },
            where=fresh,
        ).returning(Agent.id)
        return (await conn.execute(upsert)).first() is not None


def _keep_held(new_status: object) -> object:
    return case((Agent.status.in_(_HELD), Agent.status), else_=new_status)
