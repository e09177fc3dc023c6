"""Read side of agents for the API. An agent's occupied slots and kernel count are derived from
its placed kernels that have not ended (`agent_occupancy`), never stored; it reads as schedulable
only while READY and not held off scheduling. Its history (`agent_history`) is listed newest
first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exists, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.image_refs import split_stored
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus
from sokovan.db.models import Agent, AgentHistory
from sokovan.manager.repositories.paging import decode_cursor, encode_cursor
from sokovan.state.occupancy import agent_occupancy

_COLUMNS = (
    Agent.id,
    Agent.status,
    Agent.status_changed_at,
    Agent.status_info,
    Agent.agent_class,
    Agent.scaling_group,
    Agent.available_slots,
    Agent.last_heartbeat_at,
    Agent.heartbeat_seq,
    Agent.boot_id,
    Agent.health,
    Agent.rejected_beats,
    Agent.disabled,
    Agent.schedulable,
    Agent.images,
    Agent.rpc_addr,
    Agent.backend,
    Agent.devices,
)


@dataclass(frozen=True)
class AgentFilter:
    statuses: Sequence[str] = ()
    scaling_group: str | None = None


async def _views(conn: AsyncConnection, rows: Sequence[Any]) -> list[dict[str, Any]]:
    if not rows:
        return []
    held = await occupancies(conn, [r.id for r in rows])
    return [_view(r, held[r.id]) for r in rows]


async def occupancies(conn: AsyncConnection, agent_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """What these agents' views show of their live kernels (`occupied_slots`, `running_kernels`),
    by id, every id included (one statement; none for no ids)."""
    if not agent_ids:
        return {}
    occupied, counts = await agent_occupancy(conn, agent_ids)
    return {
        a: {"occupied_slots": occupied.get(a, ResourceSlots()).to_json(), "running_kernels": counts.get(a, 0)}
        for a in agent_ids
    }


def _beat(r: Any) -> dict[str, Any]:
    """What an agent's view shows of its last heartbeat (the fields that change with every beat)."""
    return {
        "last_heartbeat_at": r.last_heartbeat_at,
        "heartbeat_seq": r.heartbeat_seq,
        "health": dict(r.health or {}),
        "devices": list(r.devices or []),
    }


def _view(r: Any, held: dict[str, Any]) -> dict[str, Any]:
    """One agent's JSON (`held`: its `occupancies` entry). Its stored image list is taken apart
    (`image_refs.split_stored`): the images it holds, and the registries it may pull from (default
    first), without the marks."""
    images, registries = split_stored(r.images or [])
    return {
        "id": r.id,
        "status": r.status,
        "status_changed_at": r.status_changed_at,
        "status_info": dict(r.status_info or {}),
        "agent_class": r.agent_class,
        "scaling_group": r.scaling_group,
        "available_slots": ResourceSlots.from_json(r.available_slots).to_json(),
        **held,
        **_beat(r),
        "boot_id": r.boot_id,
        "rejected_beats": r.rejected_beats,
        "disabled": r.disabled,
        "schedulable": r.status == AgentStatus.READY and r.schedulable,
        "images": images,
        "registries": registries,
        "backend": r.backend,
        "rpc_addr": r.rpc_addr,
    }


async def get_agent(conn: AsyncConnection, agent_id: str) -> dict[str, Any] | None:
    rows = (await conn.execute(select(*_COLUMNS).where(Agent.id == agent_id))).all()
    views = await _views(conn, rows)
    return views[0] if views else None


async def get_agents(conn: AsyncConnection, agent_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The views of these agents (those that exist), in no particular order."""
    if not agent_ids:
        return []
    rows = (await conn.execute(select(*_COLUMNS).where(Agent.id.in_(list(agent_ids))))).all()
    return await _views(conn, rows)


_BEATS = text("SELECT id, last_heartbeat_at, heartbeat_seq, health, devices FROM agents WHERE id = ANY(:ids)")


async def get_beats(conn: AsyncConnection, agent_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The heartbeat's own fields of these agents' views (`_beat`), by id: what changes with every
    beat, read without the rest of the row or the agents' kernels."""
    if not agent_ids:
        return {}
    return {r.id: _beat(r) for r in (await conn.execute(_BEATS, {"ids": list(agent_ids)})).all()}


async def agent_exists(conn: AsyncConnection, agent_id: str) -> bool:
    return bool(await conn.scalar(select(exists().where(Agent.id == agent_id))))


async def list_history(
    conn: AsyncConnection, agent_id: str, limit: int, cursor: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """The agent's status changes, newest first; `cursor` continues after the last row's id."""
    query = select(
        AgentHistory.id,
        AgentHistory.from_status,
        AgentHistory.to_status,
        AgentHistory.handler,
        AgentHistory.result,
        AgentHistory.message,
        AgentHistory.actor,
        AgentHistory.created_at,
    ).where(AgentHistory.agent_id == agent_id)
    if cursor is not None:
        before = decode_cursor(cursor).get("id")
        if not isinstance(before, int) or isinstance(before, bool):
            raise ValueError("malformed cursor")
        query = query.where(AgentHistory.id < before)
    rows = (await conn.execute(query.order_by(AgentHistory.id.desc()).limit(limit + 1))).all()
    more = len(rows) > limit
    rows = rows[:limit]
    items = [
        {
            "from": r.from_status,
            "to": r.to_status,
            "handler": r.handler,
            "result": r.result,
            "reason": r.message,
            "actor": r.actor,
            "at": r.created_at,
        }
        for r in rows
    ]
    return items, encode_cursor({"id": rows[-1].id}) if more and rows else None
