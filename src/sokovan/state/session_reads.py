"""The session read model handlers work on, and its batched reads: one statement per kind of row.

`SessionWithKernels` is what every session handler and the placement pipeline see; `fetch_sessions`
reads a batch of them, deciding a promotion's kernel condition (ALL / ANY / NOT_ANY) in SQL so that
an idle cycle reads nothing.

The placement lane reads through a `PlacementWindow` instead of "the oldest N": at most `per_owner`
pending sessions of each (scaling group, keypair), taken round-robin across owners (every owner's
first before anyone's second) up to `limit`, so one owner's queue, however long, never hides
another's. Sessions blocked on a dependency that has not ended are left out in SQL; they are read
only to be told why they wait (once, while they have no pending_reason) and to expire.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import enum
import functools
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    DateTime,
    Interval,
    Select,
    and_,
    any_,
    bindparam,
    exists,
    func,
    or_,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Agent, Kernel, ScalingGroup, Session, SessionDependency
from sokovan.state.status_info import SessionStatusInfo, status_info_of

BATCH_LIMIT = 5000
# Rows turned into sessions between two turns of the event loop: a lane reading thousands of
# sessions must not hold the process's API and event consumer for the whole of it.
YIELD_EVERY = 250


@dataclass(frozen=True)
class PlacementWindow:
    """How the placement lane's read is bounded: `limit` sessions in all, `per_owner` per
    (scaling group, keypair)."""

    limit: int = BATCH_LIMIT
    per_owner: int = BATCH_LIMIT


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

    @property
    def requested_slots(self) -> ResourceSlots:
        return self.resources.scaled(self.cluster_size)


class KernelMatchType(enum.Enum):
    ALL = "all"
    ANY = "any"
    NOT_ANY = "not_any"


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
) -> list[SessionWithKernels]:
    """Sessions in `statuses`, oldest first.

    `kernel_statuses` alone keeps sessions having a kernel in those statuses. With `match`, the
    ALL / ANY / NOT_ANY condition of a promotion is evaluated in SQL, so only sessions that meet
    it are read. `changed_before` keeps sessions that entered their status before that time;
    `where` is a handler's own extra condition. With `window` (the placement lane), the fair
    window replaces `limit`: see the module's docstring.
    """
    if where is None and changed_before is None:
        # The lanes' reads have a handful of shapes: each is built (and keyed for SQLAlchemy's
        # statement cache) once, not every cycle.
        query = _prebuilt(statuses, kernel_statuses, limit, match, window)
    else:
        query = sessions_query(
            statuses, kernel_statuses, limit, match=match, changed_before=changed_before, where=where,
            window=window, now=now,
        )  # fmt: skip
    params = {"now": now or dt.datetime.now(dt.UTC)} if window is not None else {}
    rows = (await conn.execute(query, params)).all()
    if not rows:
        return []
    ids_read = [r.id for r in rows]
    kernels = await _fetch_kernels(conn, ids_read)
    deps: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
    if SessionStatus.PENDING in statuses:
        for sid, dep in await conn.execute(_DEPENDENCIES, {"ids": ids_read}):
            deps[sid].append(dep)
    out: list[SessionWithKernels] = []
    for start in range(0, len(rows), YIELD_EVERY):
        if start:
            await asyncio.sleep(0)  # thousands of rows: let the API and the events in between
        out += [
            _session(r, kernels.get(r.id, []), tuple(deps.get(r.id, ())))
            for r in rows[start : start + YIELD_EVERY]
        ]
    return out


@functools.lru_cache(maxsize=128)
def _prebuilt(
    statuses: frozenset[SessionStatus],
    kernel_statuses: frozenset[KernelStatus] | None,
    limit: int,
    match: KernelMatchType | None,
    window: PlacementWindow | None,
) -> Select[Any]:
    """`sessions_query` without `where` or `changed_before`, kept: the window's `now` is a bound
    parameter given at each execution."""
    return sessions_query(statuses, kernel_statuses, limit, match=match, window=window)


def _ids(column: Any) -> Any:
    """`column = ANY(:ids)`, the list given at execution (`among` for statements built once)."""
    return column == any_(bindparam("ids", type_=ARRAY(column.type)))


_KERNELS = (
    select(*Kernel.__table__.c, Agent.rpc_addr)
    .outerjoin(Agent, Agent.id == Kernel.agent_id)
    .where(_ids(Kernel.session_id))
    .order_by(Kernel.session_id, Kernel.cluster_idx)
)
_DEPENDENCIES = select(SessionDependency.session_id, SessionDependency.depends_on).where(
    _ids(SessionDependency.session_id)
)


def sessions_query(
    statuses: frozenset[SessionStatus],
    kernel_statuses: frozenset[KernelStatus] | None = None,
    limit: int = BATCH_LIMIT,
    *,
    match: KernelMatchType | None = None,
    changed_before: dt.datetime | None = None,
    where: ColumnElement[bool] | None = None,
    window: PlacementWindow | None = None,
    now: dt.datetime | None = None,
) -> Select[Any]:
    """The statement `fetch_sessions` reads the session rows with (its arguments' meaning)."""
    conditions: list[ColumnElement[bool]] = [Session.status.in_([s.value for s in statuses])]
    kernel_cond = _kernel_condition(kernel_statuses, match)
    if kernel_cond is not None:
        conditions.append(kernel_cond)
    if changed_before is not None:
        conditions.append(Session.status_changed_at < changed_before)
    if where is not None:
        conditions.append(where)
    query = (
        select(*Session.__table__.c, ScalingGroup.pending_timeout)
        .join(ScalingGroup, ScalingGroup.name == Session.scaling_group)
        .order_by(Session.created_at, Session.id)
    )
    if window is None:
        query = query.where(*conditions).limit(limit)
    else:
        ids = _window_ids(conditions, window, now or dt.datetime.now(dt.UTC))
        query = query.where(Session.id.in_(select(ids.c.id)))
    return query


def _kernel_condition(
    kernel_statuses: frozenset[KernelStatus] | None, match: KernelMatchType | None
) -> ColumnElement[bool] | None:
    if kernel_statuses is None:
        return None
    listed = [k.value for k in kernel_statuses]
    has = exists().where(Kernel.session_id == Session.id, Kernel.status.in_(listed))
    if match is None or match is KernelMatchType.ANY:
        return has
    if match is KernelMatchType.NOT_ANY:
        return ~has
    return ~exists().where(Kernel.session_id == Session.id, Kernel.status.not_in(listed))


def dependency_blocked() -> ColumnElement[bool]:
    """The session depends on a session that has not ended yet (it cannot be placed; a dependency
    that ended, well or badly, is the dependency validator's to judge)."""
    dep = Session.__table__.alias("dep")
    return exists().where(
        SessionDependency.session_id == Session.id,
        dep.c.id == SessionDependency.depends_on,
        dep.c.status.in_([s.value for s in SessionStatus.non_terminal()]),
    )


def _window_ids(conditions: list[ColumnElement[bool]], window: PlacementWindow, now: dt.datetime) -> Any:
    """The ids in the fair placement window (a subquery with one column, `id`)."""
    expired = and_(
        ScalingGroup.pending_timeout > 0,
        Session.status_changed_at
        + func.make_interval(0, 0, 0, 0, 0, 0, ScalingGroup.pending_timeout, type_=Interval)
        < bindparam("now", now, type_=DateTime(timezone=True)),
    )
    told = Session.status_info["pending_reason"].is_not(None)
    rank = (
        func.row_number()
        .over(
            partition_by=(Session.scaling_group, Session.access_key),
            order_by=(Session.priority.desc(), Session.created_at, Session.id),
        )
        .label("rank")
    )
    ranked: Select[Any] = (
        select(Session.id, Session.priority, Session.created_at, rank)
        .join(ScalingGroup, ScalingGroup.name == Session.scaling_group)
        .where(*conditions, or_(~dependency_blocked(), ~told, expired))
    )
    sub = ranked.subquery("ranked")
    return (
        select(sub.c.id)
        .where(sub.c.rank <= window.per_owner)
        .order_by(sub.c.rank, sub.c.priority.desc(), sub.c.created_at, sub.c.id)
        .limit(window.limit)
        .subquery("window")
    )


async def _fetch_kernels(
    conn: AsyncConnection, session_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[KernelInfo]]:
    rows = await conn.execute(_KERNELS, {"ids": list(session_ids)})
    out: dict[uuid.UUID, list[KernelInfo]] = defaultdict(list)
    for k in rows:
        out[k.session_id].append(
            KernelInfo(
                id=k.id,
                status=KernelStatus(k.status),
                agent_id=k.agent_id,
                agent_addr=k.rpc_addr,
                cluster_role=k.cluster_role,
                cluster_idx=k.cluster_idx,
                occupied_slots=ResourceSlots.from_json(k.occupied_slots),
                exit_code=k.exit_code,
                status_info=dict(k.status_info or {}),
            )
        )
    return out


def _session(s: Any, kernels: list[KernelInfo], depends_on: tuple[uuid.UUID, ...]) -> SessionWithKernels:
    """A session row (Core, with its group's pending_timeout) and its kernels, as the handlers see it."""
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
        kernels=tuple(kernels),
        depends_on=depends_on,
        preemptible=bool(s.preemptible),
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
