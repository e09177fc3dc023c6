"""Marks of agents for the `GET /v2/agents` snapshot (`manager/api/agent_snapshot.py`): per agent,
a mark of what its entry shows of its own row but the heartbeat (`state`), one of its live kernels
(`occupancy`: its occupied slots and kernel count derive from them) and one of the heartbeat's own
fields (`beat`), from one statement that reads each agent's row and, through
`ix_kernels_agent_status`, its live kernels only: for one page (`page_marks`, a page read
afresh), the whole fleet (`fleet_marks`, the snapshot's sweep) or the agents events named
(`marks_of`). None grows with how many sessions the cluster has run.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.manager.repositories.agents_read import AgentFilter
from sokovan.manager.repositories.paging import decode_cursor, encode_cursor
from sokovan.state.occupancy import slot_holding

# Every column `agents_read._view` shows, split into the heartbeat's own (its sequence, time, health
# and devices, whose readings change with every beat) and the rest; a kernel's id
# and slots stand for what it holds (the occupancy and the kernel count are derived from them).
# `hashtextextended` is PostgreSQL's own 64-bit string hash, a few times cheaper than md5 and as
# good for telling a change (a digest, not a secret); each mark is one such hash, seeded with the
# microseconds of a timestamp it covers (formatting timestamps as text cost PostgreSQL more than
# the rest of the statement, and formatting them in Python cost the manager more than the
# statement). Ids come in bytewise order (`COLLATE "C"`), the order Python sorts them in.
_MARKS = """
    SELECT a.id,
           hashtextextended(concat_ws('|', a.status, a.status_info::text, a.agent_class,
                            a.scaling_group, a.available_slots::text, a.boot_id, a.rejected_beats,
                            a.disabled, a.schedulable, a.images::text, a.rpc_addr, a.backend),
                CAST(EXTRACT(EPOCH FROM a.status_changed_at) * 1000000 AS bigint)) AS state,
           hashtextextended(COALESCE((
                SELECT string_agg(k.id::text || k.occupied_slots::text, ',' ORDER BY k.id)
                FROM kernels k WHERE k.agent_id = a.id AND k.status = ANY(:live)), ''), 0) AS occupancy,
           hashtextextended(concat_ws('|', a.heartbeat_seq, a.health::text, a.devices::text),
                COALESCE(CAST(EXTRACT(EPOCH FROM a.last_heartbeat_at) * 1000000 AS bigint), 0)) AS beat
    FROM ({agents}) a
    ORDER BY a.id COLLATE "C"
"""
_FLEET = text(_MARKS.format(agents="SELECT * FROM agents"))
_SOME = text(_MARKS.format(agents="SELECT * FROM agents WHERE id = ANY(:ids)"))
# A page is picked first, so only its rows are hashed, whichever plan PostgreSQL picks for the paging.
_PAGE = """SELECT * FROM agents a WHERE a.id COLLATE "C" > :after {statuses} {group}
           ORDER BY a.id COLLATE "C" LIMIT :limit"""


@dataclass(frozen=True, slots=True)
class AgentMark:
    id: str
    state: int  # the agent's own row as the entry shows it, but the heartbeat's fields, as one hash
    occupancy: int  # its live kernels (what its occupied slots and kernel count derive from)
    beat: int  # last_heartbeat_at, heartbeat_seq, health and devices, as one hash


async def fleet_marks(conn: AsyncConnection) -> list[AgentMark]:
    """Every agent's marks, in bytewise order of id."""
    rows = (await conn.execute(_FLEET, {"live": slot_holding()})).all()
    return [AgentMark(*r) for r in rows]


async def marks_of(conn: AsyncConnection, agent_ids: Collection[str]) -> list[AgentMark]:
    """The marks of those of `agent_ids` that exist (none read for no ids)."""
    if not agent_ids:
        return []
    rows = (await conn.execute(_SOME, {"live": slot_holding(), "ids": list(agent_ids)})).all()
    return [AgentMark(*r) for r in rows]


def cursor_id(cursor: str) -> str:
    """The id a page's cursor continues after; a cursor this module did not hand out is a
    ValueError."""
    key = decode_cursor(cursor).get("id")
    if not isinstance(key, str):
        raise ValueError("malformed cursor")
    return key


async def page_marks(
    conn: AsyncConnection, flt: AgentFilter, limit: int, cursor: str | None
) -> tuple[list[AgentMark], str | None]:
    """The marks of one page of agents by id, bytewise, and the cursor of the next page; a cursor
    this module did not hand out is a ValueError."""
    after = "" if cursor is None else cursor_id(cursor)
    params: dict[str, object] = {"live": slot_holding(), "after": after, "limit": limit + 1}
    statuses = group = ""
    if flt.statuses:
        statuses, params["statuses"] = "AND a.status = ANY(:statuses)", list(flt.statuses)
    if flt.scaling_group is not None:
        group, params["group"] = "AND a.scaling_group = :group", flt.scaling_group
    page = _PAGE.format(statuses=statuses, group=group)
    rows = (await conn.execute(text(_MARKS.format(agents=page)), params)).all()
    marks = [AgentMark(*r) for r in rows[:limit]]
    more = len(rows) > limit
    return marks, encode_cursor({"id": marks[-1].id}) if more and marks else None
