"""The resolvers of `POST /admin/gql`: the three roots and a session's `dependencies`.

Every read goes through `sessions_read` with the caller's `Principal`, so a user sees only its own
sessions (another's reads like none: `compute_session` is null) and an admin sees all. What a
caller may not ask (a bad argument, another keypair's sessions for a user) is a `GraphQLError`,
which the client reads in the answer's `errors`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from graphql import GraphQLError, GraphQLObjectType, GraphQLResolveInfo, GraphQLSchema
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.common.types import SessionStatus
from sokovan.manager.api.common import MAX_LIMIT
from sokovan.manager.api.compat.gql_items import keypair_item, session_item
from sokovan.manager.repositories import compat_read, sessions_read
from sokovan.manager.repositories.tenancy import Principal

# Backend.AI statuses Sokovan never gives a session: asking for them matches nothing.
NOT_IN_SOKOVAN = frozenset({"RESTARTING", "RUNNING_DEGRADED"})


@dataclass(frozen=True)
class GqlContext:
    """What every resolver reads with: the database and who asks."""

    engine: AsyncEngine
    principal: Principal


def _ctx(info: GraphQLResolveInfo[GqlContext]) -> GqlContext:
    ctx = info.context
    assert isinstance(ctx, GqlContext)
    return ctx


def statuses_of(status: str) -> list[str]:
    """Backend.AI's comma-separated `status` as Sokovan's statuses (names it lacks drop out)."""
    names = [part.strip().upper() for part in status.split(",")]
    unknown = [n for n in names if n not in SessionStatus.__members__ and n not in NOT_IN_SOKOVAN]
    if unknown:
        raise GraphQLError(f"unknown session status: {', '.join(repr(n) for n in unknown)}")
    return [n for n in names if n in SessionStatus.__members__]


def order_of(order: str) -> list[tuple[str, bool]]:
    """Backend.AI's `order`: comma-separated names, each `-` (descending) or `+`/nothing (ascending)."""
    keys: list[tuple[str, bool]] = []
    for part in (p.strip() for p in order.split(",")):
        desc = part.startswith("-")
        name = part.lstrip("+-").strip()
        if name not in sessions_read.ORDERABLE:
            known = ", ".join(sorted(sessions_read.ORDERABLE))
            raise GraphQLError(f"cannot order sessions by {name!r}; one of: {known}")
        keys.append((name, desc))
    return keys


def _project_id(group_id: str | None) -> uuid.UUID | None:
    if group_id is None:
        return None
    try:
        return uuid.UUID(group_id)
    except ValueError as exc:
        raise GraphQLError(f"group_id {group_id!r} is not a UUID") from exc


async def _items(
    conn: AsyncConnection, views: list[dict[str, Any]], principal: Principal
) -> list[dict[str, Any]]:
    extras = await compat_read.session_extras(conn, [uuid.UUID(v["id"]) for v in views])
    return [session_item(v, extras.get(uuid.UUID(v["id"])), principal) for v in views]


async def resolve_keypair(
    _root: Any,
    info: GraphQLResolveInfo[GqlContext],
    domain_name: str | None = None,
    access_key: str | None = None,
) -> dict[str, Any] | None:
    """The caller's keypair; an admin may name another (a user naming another reads null)."""
    ctx = _ctx(info)
    key = access_key if access_key is not None else ctx.principal.access_key
    if key != ctx.principal.access_key and not ctx.principal.is_admin:
        return None
    async with ctx.engine.connect() as conn:
        kp = await compat_read.keypair_info(conn, key)
    if kp is None or (domain_name is not None and kp.domain_name != domain_name):
        return None
    return keypair_item(kp)


async def resolve_session_list(
    _root: Any,
    info: GraphQLResolveInfo[GqlContext],
    limit: int,
    offset: int,
    filter: str | None = None,
    order: str | None = None,
    domain_name: str | None = None,
    group_id: str | None = None,
    access_key: str | None = None,
    status: str | None = None,
) -> dict[str, Any]:
    ctx = _ctx(info)
    principal = ctx.principal
    if not 1 <= limit <= MAX_LIMIT:
        raise GraphQLError(f"limit must be between 1 and {MAX_LIMIT}")
    if offset < 0:
        raise GraphQLError("offset must not be negative")
    if filter is not None:
        raise GraphQLError("filter expressions are not supported by Sokovan; use status or access_key")
    if access_key is not None and access_key != principal.access_key and not principal.is_admin:
        raise GraphQLError("only admins may list other keypairs' sessions")
    statuses = statuses_of(status) if status is not None else None
    if statuses == []:  # only statuses Sokovan never gives
        return {"items": [], "total_count": 0}
    flt = sessions_read.SessionFilter(
        statuses=statuses or (),
        access_key=access_key,
        domain_name=domain_name,
        project_id=_project_id(group_id),
    )
    keys = order_of(order) if order is not None else []
    async with ctx.engine.connect() as conn:
        views, total = await sessions_read.page_sessions(conn, principal, flt, limit, offset, keys)
        items = await _items(conn, views, principal)
    return {"items": items, "total_count": total}


async def resolve_session(
    _root: Any, info: GraphQLResolveInfo[GqlContext], id: uuid.UUID
) -> dict[str, Any] | None:
    """One session by id; null when there is none or the caller may not see it."""
    ctx = _ctx(info)
    async with ctx.engine.connect() as conn:
        view = await sessions_read.get_session(conn, id, ctx.principal)
        items = await _items(conn, [view], ctx.principal) if view is not None else []
    return items[0] if items else None


async def resolve_dependencies(
    source: dict[str, Any], info: GraphQLResolveInfo[GqlContext]
) -> list[dict[str, Any]]:
    """The sessions this one waits for (those the caller may see), in the order they were named."""
    ctx = _ctx(info)
    ids = [uuid.UUID(d) for d in source.get("_depends_on", [])]
    if not ids:
        return []
    async with ctx.engine.connect() as conn:
        views = await sessions_read.sessions_by_ids(conn, ids, ctx.principal)
        items = {i["id"]: i for i in await _items(conn, views, ctx.principal)}
    return [items[str(i)] for i in ids if str(i) in items]


def attach(schema: GraphQLSchema) -> GraphQLSchema:
    """`schema` with the resolvers set on its fields."""
    query = schema.query_type
    session = schema.type_map["ComputeSession"]
    assert query is not None and isinstance(session, GraphQLObjectType)
    query.fields["keypair"].resolve = resolve_keypair
    query.fields["compute_session_list"].resolve = resolve_session_list
    query.fields["compute_session"].resolve = resolve_session
    session.fields["dependencies"].resolve = resolve_dependencies
    return schema
