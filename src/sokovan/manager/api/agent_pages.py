"""`GET /v2/agents` pages from a cache of rendered entries, and their weak `ETag`.

A dashboard polls the fleet every second or so, and 1,000 agents are two pages of 500. Each
request first reads the page's marks (`repositories.agent_marks`: two digests per agent, one
statement); an agent whose marks are the ones this worker rendered last keeps its rendered JSON,
and only the others are read whole and rendered again. The page is then the cached entries
joined, byte for byte what `AgentList.model_dump_json()` would give.

The `ETag` is weak: it names the page's agents with their `state` and `occupancy` marks (everything
shown but the heartbeat's own fields), the next cursor, the query, who asks (a user is shown less), and the
current `BEAT_EPOCH_S` window of the clock. So a poller that sends `If-None-Match` gets `304` (and
costs the marks statement only) while nothing but heartbeats changed in the fleet, and a fresh page
whenever an agent's status, slots, occupancy or settings change, or a new window begins: the
`last_heartbeat_at` it holds is then at most that much behind. In a fresh page, an agent whose
own row did not change has only what did (its occupancy, from its live kernels, or its heartbeat's
fields) read again and put into its entry: under load kernels come and go on every agent, and
every agent beats once per window. Workers agree on the tag, as it is made only of what PostgreSQL
holds and the clock.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.gpu import DeviceInfo
from sokovan.manager.api.admin_schemas import AgentOut
from sokovan.manager.api.conditional import names_match
from sokovan.manager.api.redact import shown_info
from sokovan.manager.repositories import agents_read
from sokovan.manager.repositories.agent_marks import AgentMark, page_marks
from sokovan.manager.repositories.tenancy import Principal

BEAT_EPOCH_S = 10.0  # a 304 holds back heartbeat fields at most this long (the default interval)
MAX_ENTRIES = 50_000  # rendered agents kept per worker; past it the cache starts over


@dataclass
class _Entry:
    state: int
    occupancy: int
    beat: int
    agent: AgentOut
    admin_json: bytes
    user_json: bytes | None = None  # the entry as any user sees it, where that is the same for all
    per_user: bool = field(default=False)  # status_info names access keys: redacted per caller


def _names_access_keys(value: object) -> bool:
    if isinstance(value, dict):
        return any(
            (isinstance(k, str) and k.lower().endswith("access_key")) or _names_access_keys(v)
            for k, v in value.items()
        )
    if isinstance(value, list):
        return any(_names_access_keys(v) for v in value)
    return False


def _for_user(agent: AgentOut, principal: Principal) -> bytes:
    info = shown_info(agent.status_info, principal)
    return agent.model_copy(update={"rpc_addr": None, "status_info": info}).model_dump_json().encode()


class AgentPages:
    """One worker's rendered agents; `page()` answers one `GET /v2/agents`."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def _json(self, entry: _Entry, principal: Principal) -> bytes:
        if principal.is_admin:
            return entry.admin_json
        if entry.per_user:
            return _for_user(entry.agent, principal)
        if entry.user_json is None:
            entry.user_json = _for_user(entry.agent, principal)
        return entry.user_json

    async def _refresh(self, conn: AsyncConnection, marks: list[AgentMark]) -> None:
        """Bring the page's entries up to its marks. An agent whose own row changed (or that is
        new here) is read and rendered whole; one whose live kernels or heartbeat alone moved (under
        load, or once per beat: the common cases) has only its occupancy or the heartbeat's fields
        read and put into its entry."""
        held = self._entries
        stale: list[AgentMark] = []
        patched: list[AgentMark] = []
        for m in marks:
            entry = held.get(m.id)
            if entry is None or entry.state != m.state:
                stale.append(m)
            elif (entry.occupancy, entry.beat) != (m.occupancy, m.beat):
                patched.append(m)
        if len(self._entries) + len(stale) > MAX_ENTRIES:
            self._entries.clear()
            stale, patched = marks, []
        if patched:
            await self._patch(conn, patched)
        if not stale:
            return
        by_id = {m.id: m for m in stale}
        for view in await agents_read.get_agents(conn, list(by_id)):
            agent = AgentOut.model_validate(view)
            mark = by_id[agent.id]
            self._entries[agent.id] = _Entry(
                state=mark.state,
                occupancy=mark.occupancy,
                beat=mark.beat,
                agent=agent,
                admin_json=agent.model_dump_json().encode(),
                per_user=_names_access_keys(agent.status_info),
            )

    async def _patch(self, conn: AsyncConnection, marks: list[AgentMark]) -> None:
        """New occupancy or a new heartbeat in rendered entries: those fields read (a statement
        for each kind, for the agents whose mark of it moved) and replaced, the rest kept as is."""
        occupied = [m.id for m in marks if self._entries[m.id].occupancy != m.occupancy]
        beaten = [m.id for m in marks if self._entries[m.id].beat != m.beat]
        fields: dict[str, dict[str, Any]] = {m.id: {} for m in marks}
        for agent_id, held in (await agents_read.occupancies(conn, occupied)).items():
            fields[agent_id].update(held)
        for agent_id, beat in (await agents_read.get_beats(conn, beaten)).items():
            beat["devices"] = [DeviceInfo.model_validate(d) for d in beat["devices"]]
            fields[agent_id].update(beat)
        for mark in marks:
            entry = self._entries[mark.id]
            entry.agent = entry.agent.model_copy(update=fields[mark.id])
            entry.admin_json = entry.agent.model_dump_json().encode()
            entry.user_json = None
            entry.occupancy, entry.beat = mark.occupancy, mark.beat

    @staticmethod
    def tag(request: web.Request, principal: Principal, marks: list[AgentMark], cursor: str | None) -> str:
        digest = hashlib.blake2b(digest_size=16)
        who = "admin" if principal.is_admin else f"user:{principal.access_key}"
        window = int(time.time() // BEAT_EPOCH_S)
        digest.update(f"agents|{who}|{request.query_string}|{cursor}|{window}".encode())
        for mark in marks:
            digest.update(f"|{mark.id}:{mark.state}:{mark.occupancy}".encode())
        return 'W/"' + digest.hexdigest() + '"'

    async def page(
        self,
        request: web.Request,
        conn: AsyncConnection,
        principal: Principal,
        flt: agents_read.AgentFilter,
        limit: int,
        cursor: str | None,
    ) -> web.Response:
        """The page, or 304 when the request's `If-None-Match` names its tag. A cursor the marks
        cannot read raises ValueError."""
        marks, next_cursor = await page_marks(conn, flt, limit, cursor)
        tag = self.tag(request, principal, marks, next_cursor)
        wanted = request.headers.get("If-None-Match")
        if wanted is not None and names_match(wanted, tag):
            return web.Response(status=304, headers={"ETag": tag})
        await self._refresh(conn, marks)
        items = b",".join(self._json(self._entries[m.id], principal) for m in marks if m.id in self._entries)
        body = b'{"items":[' + items + b'],"next_cursor":' + json.dumps(next_cursor).encode() + b"}"
        return web.Response(body=body, content_type="application/json", headers={"ETag": tag})
