"""`GET /v2/agents` pages from rendered entries of the whole fleet, and their weak `ETag`.

A dashboard polls the fleet every second or so, and 1,000 agents are two pages of 500. The worker
keeps every agent rendered, with the marks it was rendered at (`repositories.agent_marks`: three
digests per agent). `refresh()` brings entries up to newer marks (the snapshot's sweep of the whole
fleet, or the marks of the agents events named: `agent_snapshot`): an agent whose own row changed
(or that is new here) is read and rendered whole; one whose live kernels or heartbeat alone moved
(under load, or once per beat: the common cases) has only its occupancy or the heartbeat's fields
read and put into its entry. `page()` then answers from the entries alone, without I/O;
`read_page()` reads the page's own marks first (one statement) and brings its entries up to them,
as consistent as reading the rows. Either way the page is its entries joined, byte for byte what
`AgentList.model_dump_json()` would give.

The `ETag` is weak: it names the page's agents with their `state` and `occupancy` marks (everything
shown but the heartbeat's own fields), the next cursor, the query, who asks (a user is shown less), and the
current `BEAT_EPOCH_S` window of the clock. So a poller that sends `If-None-Match` gets `304` while
nothing but heartbeats changed in the fleet, and a fresh page whenever an agent's status, slots,
occupancy or settings change, or a new window begins: the `last_heartbeat_at` it holds is then at
most that much behind. Workers agree on the tag, as it is made only of what PostgreSQL holds and the
clock.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.gpu import DeviceInfo
from sokovan.manager.api.admin_schemas import AgentOut
from sokovan.manager.api.conditional import names_match
from sokovan.manager.api.redact import shown_info
from sokovan.manager.repositories import agents_read
from sokovan.manager.repositories.agent_marks import AgentMark, cursor_id, page_marks
from sokovan.manager.repositories.paging import encode_cursor
from sokovan.manager.repositories.tenancy import Principal

BEAT_EPOCH_S = 10.0  # a 304 holds back heartbeat fields at most this long (the default interval)


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


def _unchanged(request: web.Request, tag: str) -> bool:
    wanted = request.headers.get("If-None-Match")
    return wanted is not None and names_match(wanted, tag)


class AgentPages:
    """One worker's rendered agents; `page()` answers one `GET /v2/agents`."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._order: list[str] = []  # every agent's id, bytewise (as the marks come)

    def _json(self, entry: _Entry, principal: Principal) -> bytes:
        if principal.is_admin:
            return entry.admin_json
        if entry.per_user:
            return _for_user(entry.agent, principal)
        if entry.user_json is None:
            entry.user_json = _for_user(entry.agent, principal)
        return entry.user_json

    async def refresh(self, conn: AsyncConnection, marks: Sequence[AgentMark], whole: bool) -> None:
        """Bring the entries of the agents `marks` names up to them; with `whole` (marks of the
        whole fleet), the agents it does not name are dropped. An agent whose own row changed (or that is
        new here) is read and rendered whole; one whose live kernels or heartbeat alone moved (under
        load, or once per beat: the common cases) has only its occupancy or the heartbeat's fields
        read and put into its entry. Callers do not run two at once (`agent_snapshot`)."""
        held = self._entries
        if whole:
            named = {m.id for m in marks}
            for gone in [i for i in held if i not in named]:
                del held[gone]
        stale: list[AgentMark] = []
        patched: list[AgentMark] = []
        for m in marks:
            entry = held.get(m.id)
            if entry is None or entry.state != m.state:
                stale.append(m)
            elif (entry.occupancy, entry.beat) != (m.occupancy, m.beat):
                patched.append(m)
        if patched:
            await self._patch(conn, patched)
        if stale:
            await self._render(conn, stale)
        if whole or len(self._order) != len(held):  # an agent new here, or some gone
            self._order = sorted(held)

    async def _render(self, conn: AsyncConnection, stale: list[AgentMark]) -> None:
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
    def tag(
        request: web.Request, principal: Principal, marks: Iterable[tuple[str, int, int]], cursor: str | None
    ) -> str:
        """The page's weak tag from its agents' (id, state, occupancy) marks."""
        digest = hashlib.blake2b(digest_size=16)
        who = "admin" if principal.is_admin else f"user:{principal.access_key}"
        window = int(time.time() // BEAT_EPOCH_S)
        digest.update(f"agents|{who}|{request.query_string}|{cursor}|{window}".encode())
        for agent_id, state, occupancy in marks:
            digest.update(f"|{agent_id}:{state}:{occupancy}".encode())
        return 'W/"' + digest.hexdigest() + '"'

    def _selected(
        self, flt: agents_read.AgentFilter, limit: int, cursor: str | None
    ) -> tuple[list[_Entry], str | None]:
        """The page's entries, in order of id, and the next page's cursor; a cursor this module
        did not hand out raises ValueError."""
        start = 0 if cursor is None else bisect.bisect_right(self._order, cursor_id(cursor))
        wanted = set(flt.statuses)
        group = flt.scaling_group
        picked: list[_Entry] = []
        for agent_id in self._order[start:]:
            entry = self._entries.get(agent_id)
            if entry is None or (wanted and entry.agent.status.value not in wanted):
                continue
            if group is not None and entry.agent.scaling_group != group:
                continue
            if len(picked) == limit:
                return picked, encode_cursor({"id": picked[-1].agent.id})
            picked.append(entry)
        return picked, None

    def page(
        self,
        request: web.Request,
        principal: Principal,
        flt: agents_read.AgentFilter,
        limit: int,
        cursor: str | None,
    ) -> web.Response:
        """The page as the entries hold it, or 304 when the request's `If-None-Match` names its
        tag. A cursor this module did not hand out raises ValueError."""
        entries, next_cursor = self._selected(flt, limit, cursor)
        tag = self.tag(request, principal, ((e.agent.id, e.state, e.occupancy) for e in entries), next_cursor)
        if _unchanged(request, tag):
            return web.Response(status=304, headers={"ETag": tag})
        return self._answer(principal, tag, entries, next_cursor)

    async def read_page(
        self,
        conn: AsyncConnection,
        request: web.Request,
        principal: Principal,
        flt: agents_read.AgentFilter,
        limit: int,
        cursor: str | None,
    ) -> web.Response:
        """The page as PostgreSQL holds it now: its marks read, its entries brought up to them
        (the caller runs no other refresh meanwhile). A cursor this module did not hand out raises
        ValueError."""
        marks, next_cursor = await page_marks(conn, flt, limit, cursor)
        tag = self.tag(request, principal, ((m.id, m.state, m.occupancy) for m in marks), next_cursor)
        if _unchanged(request, tag):  # nothing to read or render
            return web.Response(status=304, headers={"ETag": tag})
        await self.refresh(conn, marks, whole=False)
        entries = [self._entries[m.id] for m in marks if m.id in self._entries]
        return self._answer(principal, tag, entries, next_cursor)

    def _answer(
        self, principal: Principal, tag: str, entries: list[_Entry], next_cursor: str | None
    ) -> web.Response:
        """A 200: the entries joined, under `tag`."""
        items = b",".join(self._json(entry, principal) for entry in entries)
        body = b'{"items":[' + items + b'],"next_cursor":' + json.dumps(next_cursor).encode() + b"}"
        return web.Response(body=body, content_type="application/json", headers={"ETag": tag})
