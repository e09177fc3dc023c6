"""The session read model handlers work on, and its batched reads: one statement per read.

`SessionWithKernels` is what every session handler and the placement pipeline see; `fetch_sessions`
reads a batch of them, each row carrying its kernels (and a waiting session's dependencies), and
decides a promotion's kernel condition (ALL / ANY / NOT_ANY) in SQL so that an idle cycle reads
nothing. The statements themselves, and the placement lane's fair window, are
`session_queries`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, text
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.state.session_queries import (
    BATCH_LIMIT,
    KernelMatchType,
    Narrowing,
    PlacementWindow,
    kept,
    sessions_query,
)
from sokovan.state.status_info import SessionStatusInfo, status_info_of

# Rows turned into sessions between two turns of the event loop: a lane reading thousands of
# sessions must not hold the process's API and event consumer for the whole of it.
YIELD_EVERY = 250


@dataclass(frozen=True)
class KernelInfo:
    id: uuid.UUID
    status: KernelStatus
    agent_id: str | None
    agent_addr: str | None
    cluster_role: str
    cluster_idx: int
    occupied_slots: ResourceSlots
    exit_code: int | None
    status_info: dict[str, Any]
    devices: tuple[str, ...] = ()  # the GPUs it was given when placed


@dataclass(frozen=True)
class SessionWithKernels:
    id: uuid.UUID
    name: str
    access_key: str
    user_id: uuid.UUID
    project_id: uuid.UUID
    domain_name: str
    scaling_group: str
    pending_timeout: float
    type: str
    image: str
    command: str | None
    environ: dict[str, str]
    resources: ResourceSlots
    cluster_size: int
    cluster_mode: str
    priority: int
    status: SessionStatus
    status_info: SessionStatusInfo
    status_changed_at: dt.datetime
    phase_attempts: int
    created_at: dt.datetime
    kernels: tuple[KernelInfo, ...]
    depends_on: tuple[uuid.UUID, ...] = ()
    # May be evicted for a session of strictly higher priority (CONTRACT section 9).
    preemptible: bool = False
    # The run time it declares, in seconds (CONTRACT section 16); None: none.
    max_duration: int | None = None

    @property
    def requested_slots(self) -> ResourceSlots:
        return self.resources.scaled(self.cluster_size)


def kernels_match(
    kernels: Sequence[KernelInfo], statuses: frozenset[KernelStatus], match: KernelMatchType
) -> bool:
    hits = [k.status in statuses for k in kernels]
    if match is KernelMatchType.ALL:
        return all(hits)
    if match is KernelMatchType.ANY:
        return any(hits)
    return not any(hits)


async def fetch_sessions(
    conn: AsyncConnection,
    statuses: frozenset[SessionStatus],
    kernel_statuses: frozenset[KernelStatus] | None = None,
    limit: int = BATCH_LIMIT,
    *,
    match: KernelMatchType | None = None,
    changed_before: dt.datetime | None = None,
    where: ColumnElement[bool] | None = None,
    window: PlacementWindow | None = None,
    now: dt.datetime | None = None,
    narrowing: Narrowing | None = None,
) -> list[SessionWithKernels]:
    """Sessions in `statuses`, oldest first.

    `kernel_statuses` alone keeps sessions having a kernel in those statuses. With `match`, the
    ALL / ANY / NOT_ANY condition of a promotion is evaluated in SQL, so only sessions that meet
    it are read. `changed_before` keeps sessions that entered their status before that time;
    `where` is a handler's own extra condition, or `narrowing` the same kept between reads. With
    `window` (the placement lane), the fair window replaces `limit` (`session_queries`).
    """
    params: dict[str, Any] = {"now": now or dt.datetime.now(dt.UTC)} if window is not None else {}
    params.update(narrowing.params if narrowing is not None else {})
    if where is None and changed_before is None:
        # The lanes' and the event path's reads have a handful of shapes: each is built (and keyed
        # for SQLAlchemy's statement cache) once, not at every read.
        query = kept(statuses, kernel_statuses, limit, match, window, narrowing)
    else:
        if narrowing is not None:
            where = narrowing.build() if where is None else where & narrowing.build()
        query = sessions_query(
            statuses, kernel_statuses, limit, match=match, changed_before=changed_before, where=where,
            window=window, now=now,
        )  # fmt: skip
    result = await conn.execute(query, params)
    # Only a waiting session's read has `depends_json`: asked of the result once, not of each row
    # (a row's miss raises inside SQLAlchemy, some 4 µs).
    depends = "depends_json" in result.keys()
    rows = result.all()
    out: list[SessionWithKernels] = []
    for start in range(0, len(rows), YIELD_EVERY):
        if start:
            await asyncio.sleep(0)  # thousands of rows: let the API and the events in between
        out += [_session(r, depends) for r in rows[start : start + YIELD_EVERY]]
    return out


def _kernel(k: dict[str, Any]) -> KernelInfo:
    """A kernel of a session row's `kernels_json` (`session_queries`)."""
    return KernelInfo(
        id=uuid.UUID(k["id"]),
        status=KernelStatus(k["status"]),
        agent_id=k["agent_id"],
        agent_addr=k["rpc_addr"],
        cluster_role=k["cluster_role"],
        cluster_idx=k["cluster_idx"],
        occupied_slots=ResourceSlots.from_json(k["occupied_slots"]),
        exit_code=k["exit_code"],
        status_info=dict(k["status_info"] or {}),
        devices=tuple(k.get("devices") or ()),
    )


def _session(s: Any, depends: bool) -> SessionWithKernels:
    """A session row (Core, with its group's pending_timeout, its kernels and, with `depends`, for
    a waiting session, what it depends on), as the handlers see it."""
    depends_on = (s.depends_json or ()) if depends else ()
    return SessionWithKernels(
        id=s.id,
        name=s.name,
        access_key=s.access_key,
        user_id=s.user_id,
        project_id=s.project_id,
        domain_name=s.domain_name,
        scaling_group=s.scaling_group,
        pending_timeout=s.pending_timeout,
        type=s.type,
        image=s.image,
        command=s.command,
        environ={str(k): str(v) for k, v in (s.environ or {}).items()},
        resources=ResourceSlots.from_json(s.resources),
        cluster_size=s.cluster_size,
        cluster_mode=s.cluster_mode,
        priority=s.priority,
        status=SessionStatus(s.status),
        status_info=status_info_of(s.status_info),
        status_changed_at=s.status_changed_at,
        phase_attempts=s.phase_attempts,
        created_at=s.created_at,
        kernels=tuple(_kernel(k) for k in s.kernels_json),
        depends_on=tuple(depends_on),
        preemptible=bool(s.preemptible),
        max_duration=s.max_duration,
    )


_PRESENT = text(
    "SELECT s FROM unnest(CAST(:statuses AS varchar[])) AS s "
    "WHERE EXISTS (SELECT 1 FROM sessions WHERE sessions.status = s)"
)


async def statuses_present(conn: AsyncConnection, statuses: Sequence[str]) -> frozenset[str]:
    """Which of `statuses` at least one session is in: one index probe per status, whatever the
    table's size (a lane's cheap look before its handlers' reads)."""
    rows = await conn.execute(_PRESENT, {"statuses": list(statuses)})
    return frozenset(str(r[0]) for r in rows)
