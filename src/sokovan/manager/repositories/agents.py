"""Agents as the manager learns them from heartbeats."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

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


async def record_heartbeats(engine: AsyncEngine, beats: Sequence[AgentHeartbeat]) -> list[str]:
    """Register or refresh agents in one statement; a beat older than the last one seen is ignored.

    Returns the ids of the agents whose row changed (stale beats and beats naming a scaling group
    that does not exist are left out).
    """
    latest: dict[str, AgentHeartbeat] = {}
    for hb in beats:  # stream order: the last beat of an agent wins
        latest[hb.agent_id] = hb
    # Rows in id order: managers upserting overlapping batches then lock agents in one order.
    latest = dict(sorted(latest.items()))
    if not latest:
        return []
    now = dt.datetime.now(dt.UTC)
    async with engine.begin() as conn:
        groups = {hb.scaling_group for hb in latest.values()}
        known = set(
            (await conn.execute(select(ScalingGroup.name).where(ScalingGroup.name.in_(groups)))).scalars()
        )
        rows = []
        for hb in latest.values():
            if hb.scaling_group not in known:
                log.warning(
                    "agent.unknown_scaling_group", agent_id=hb.agent_id, scaling_group=hb.scaling_group
                )
                continue
            rows.append(
                {
                    "id": hb.agent_id,
                    "status": AgentStatus.READY.value,
                    "scaling_group": hb.scaling_group,
                    "available_slots": hb.available_slots,
                    "rpc_addr": hb.rpc_addr,
                    "images": sorted(hb.images),
                    "boot_id": hb.boot_id,
                    "heartbeat_seq": hb.seq,
                    "last_heartbeat_at": now,
                    "max_kernels": hb.max_kernels,
                    "running_kernels": hb.running_kernels,
                }
            )
        if not rows:
            return []
        stmt = insert(Agent).values(rows)
        excluded = stmt.excluded
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
                "max_kernels": excluded.max_kernels,
                "running_kernels": excluded.running_kernels,
                "status": case((Agent.status.in_(_HELD), Agent.status), else_=excluded.status),
            },
            where=or_(Agent.boot_id != excluded.boot_id, Agent.heartbeat_seq < excluded.heartbeat_seq),
        ).returning(Agent.id)
        return list((await conn.execute(upsert)).scalars())
