"""Read side of agents for the API. An agent's occupied slots and kernel count are derived from
its placed kernels that have not ended (`agent_occupancy`), never stored."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.db.models import Agent
from sokovan.manager.repositories.paging import page_after_key
from sokovan.state.occupancy import agent_occupancy

_COLUMNS = (
    Agent.id,
    Agent.status,
    Agent.scaling_group,
    Agent.available_slots,
    Agent.last_heartbeat_at,
    Agent.heartbeat_seq,
    Agent.schedulable,
    Agent.images,
    Agent.rpc_addr,
)


@dataclass(frozen=True)
class AgentFilter:
    statuses: Sequence[str] = ()
    scaling_group: str | None = None


async def _views(conn: AsyncConnection, rows: Sequence[Any]) -> list[dict[str, Any]]:
    if not rows:
        return []
    occupied, counts = await agent_occupancy(conn, [r.id for r in rows])
    return [
        {
            "id": r.id,
            "status": r.status,
            "scaling_group": r.scaling_group,
            "available_slots": ResourceSlots.from_json(r.available_slots).to_json(),
            "occupied_slots": occupied.get(r.id, ResourceSlots()).to_json(),
            "last_heartbeat_at": r.last_heartbeat_at,
            "heartbeat_seq": r.heartbeat_seq,
            "running_kernels": counts.get(r.id, 0),
            "schedulable": r.schedulable,
            "images": list(r.images or []),
            "rpc_addr": r.rpc_addr,
        }
        for r in rows
    ]


async def get_agent(conn: AsyncConnection, agent_id: str) -> dict[str, Any] | None:
    rows = (await conn.execute(select(*_COLUMNS).where(Agent.id == agent_id))).all()
    views = await _views(conn, rows)
    return views[0] if views else None


async def list_agents(
    conn: AsyncConnection, flt: AgentFilter, limit: int, cursor: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """By id; `cursor` continues after the last id of the previous page."""
    query = select(*_COLUMNS)
    if flt.statuses:
        query = query.where(Agent.status.in_(flt.statuses))
    if flt.scaling_group is not None:
        query = query.where(Agent.scaling_group == flt.scaling_group)
    rows, next_cursor = await page_after_key(conn, query, Agent.id, "id", str, limit, cursor)
    return await _views(conn, rows), next_cursor
