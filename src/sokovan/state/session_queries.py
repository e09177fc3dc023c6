"""The statements the session reads are made of: which sessions a handler reads, and through
the placement lane's fair window.

The placement lane reads through a `PlacementWindow` instead of "the oldest N": at most `per_owner`
pending sessions of each (scaling group, keypair), taken round-robin across owners (every owner's
first before anyone's second) up to `limit`, so one owner's queue, however long, never hides
another's. Sessions blocked on a dependency that has not ended are left out in SQL; they are read
only to be told why they wait (once, while they have no pending_reason) and to expire.

The lanes and the event path read several times a second in a handful of shapes: each shape's
statement is built (and keyed for SQLAlchemy's statement cache) once, with what changes between
reads (the window's time, a handler's `Narrowing`) as bound parameters.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    DateTime,
    Interval,
    Select,
    and_,
    bindparam,
    exists,
    func,
    or_,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by

from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Agent, Kernel, ScalingGroup, Session, SessionDependency

BATCH_LIMIT = 5000


@dataclass(frozen=True)
class PlacementWindow:
    """How the placement lane's read is bounded: `limit` sessions in all, `per_owner` per
    (scaling group, keypair)."""

    limit: int = BATCH_LIMIT
    per_owner: int = BATCH_LIMIT


@dataclass(frozen=True)
class Narrowing:
    """An extra condition on a read whose statement is built once and kept: `key` names its shape
    (equal keys, equal conditions), `build` writes it with bound parameters, `params` are their
    values at this read."""

    key: Hashable
    build: Callable[[], ColumnElement[bool]]
    params: Mapping[str, Any]


class KernelMatchType(enum.Enum):
    ALL = "all"
    ANY = "any"
    NOT_ANY = "not_any"


_KEPT: dict[Hashable, Select[Any]] = {}


def kept(
    statuses: frozenset[SessionStatus],
    kernel_statuses: frozenset[KernelStatus] | None,
    limit: int,
    match: KernelMatchType | None,
    window: PlacementWindow | None,
    narrowing: Narrowing | None = None,
) -> Select[Any]:
    """`sessions_query` without `changed_before`, built on its shape's first read and kept: the
    window's `now` and the `narrowing`'s parameters are bound at each execution."""
    key = (narrowing.key if narrowing is not None else None, statuses, kernel_statuses, limit, match, window)
    query = _KEPT.get(key)
    if query is None:
        if len(_KEPT) >= 256:
            _KEPT.clear()
        where = narrowing.build() if narrowing is not None else None
        query = _KEPT[key] = sessions_query(
            statuses, kernel_statuses, limit, match=match, where=where, window=window
        )
    return query


def _kernels_column() -> Any:
    """Each session's kernels (with their agents' addresses), in cluster order, as one JSON array:
    read with the sessions, not by a second statement."""
    k, agent = Kernel.__table__.alias("k"), Agent.__table__.alias("ka")
    fields = (
        "id",
        "status",
        "agent_id",
        "cluster_role",
        "cluster_idx",
        "occupied_slots",
        "exit_code",
        "devices",
    )
    kernel = func.json_build_object(
        *(part for name in fields for part in (name, k.c[name])),
        "status_info",
        k.c.status_info,
        "rpc_addr",
        agent.c.rpc_addr,
    )
    return (
        select(func.coalesce(func.json_agg(aggregate_order_by(kernel, k.c.cluster_idx)), text("'[]'::json")))
        .select_from(k.outerjoin(agent, agent.c.id == k.c.agent_id))
        .where(k.c.session_id == Session.id)
        .scalar_subquery()
        .label("kernels_json")
    )


def _dependencies_column() -> Any:
    """What each session depends on, as an array (read for waiting sessions only)."""
    dep = SessionDependency.__table__.alias("dep_of")
    return (
        select(func.array_agg(dep.c.depends_on))
        .where(dep.c.session_id == Session.id)
        .scalar_subquery()
        .label("depends_json")
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
    extra = [_kernels_column()]
    if SessionStatus.PENDING in statuses:
        extra.append(_dependencies_column())
    query = (
        select(*Session.__table__.c, ScalingGroup.pending_timeout, *extra)
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
    """The ALL / ANY / NOT_ANY condition on a session's kernels, as an aggregate over the session's
    own kernels (a subplan per session, through the kernels' session index).

    Not as EXISTS: PostgreSQL turns that into a semi join, and while the statistics are older than
    a burst (they said no kernel was SCHEDULED; now 5,000 are), it estimated one row for the
    kernels in the wanted status and re-scanned them for every session, 12.5 million rows for
    5,000 sessions: the call lanes' read took 2-3.6 s in the burst and 10.8 s when reproduced,
    against 30 ms this way. A status tested inside the aggregate cannot drive the plan."""
    if kernel_statuses is None:
        return None
    listed = [k.value for k in kernel_statuses]
    hit = Kernel.status.in_(listed)
    of_session = Kernel.session_id == Session.id
    if match is KernelMatchType.ALL:
        every = select(func.bool_and(hit)).where(of_session).scalar_subquery()
        return func.coalesce(every, True)  # a session without kernels matches, as before
    some = func.coalesce(select(func.bool_or(hit)).where(of_session).scalar_subquery(), False)
    return ~some if match is KernelMatchType.NOT_ANY else some


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
