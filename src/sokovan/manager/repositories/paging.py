"""Keyset pagination of the API's lists: opaque cursors, and the pages they continue.

A cursor is base64url of a small JSON document naming the last item of the previous page: its
key, for lists in the order of one unique column (`page_after_key`), or its creation time and id,
for lists by creation time (`page_by_time`). A cursor this module did not hand out is a
ValueError, which the API answers with a 400: one that is not a flat object of scalars, whose
integers do not fit a BIGINT, whose strings carry NUL, or whose time is not a time PostgreSQL
can compare (an offset-aware ISO 8601 time in years 1-9999 once in UTC).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, Select, and_, or_
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import InstrumentedAttribute


def encode_cursor(values: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(values, separators=(",", ":")).encode()).decode().rstrip("=")


MAX_CURSOR = 1024  # characters: a cursor names one item
BIGINT = range(-(2**63), 2**63)


def decode_cursor(cursor: str) -> dict[str, Any]:
    """Raises ValueError for anything this module did not hand out."""
    if len(cursor) > MAX_CURSOR:
        raise ValueError("malformed cursor")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError("malformed cursor") from exc
    if not isinstance(value, dict) or not all(_scalar(v) for v in value.values()):
        raise ValueError("malformed cursor")
    return value


def _scalar(value: object) -> bool:
    """A value a cursor may hold and a query may compare with."""
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, int):
        return value in BIGINT
    if isinstance(value, str):
        return "\x00" not in value
    return isinstance(value, float)


async def page_after_key(
    conn: AsyncConnection,
    query: Select[Any],
    column: InstrumentedAttribute[Any],
    key: str,
    kind: type[int] | type[str],
    limit: int,
    cursor: str | None,
) -> tuple[Sequence[Row[Any]], str | None]:
    """Up to `limit` rows of `query` in the order of the unique `column` (the rows' attribute `key`,
    of type `kind`), after the one the cursor names; and the cursor of the next page, if any."""
    if cursor is not None:
        after = decode_cursor(cursor).get(key)
        if not isinstance(after, kind) or isinstance(after, bool):
            raise ValueError("malformed cursor")
        query = query.where(column > after)
    rows = (await conn.execute(query.order_by(column).limit(limit + 1))).all()
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, encode_cursor({key: getattr(rows[-1], key)}) if more and rows else None


async def page_by_time(
    conn: AsyncConnection,
    query: Select[Any],
    created: InstrumentedAttribute[dt.datetime],
    ident: InstrumentedAttribute[uuid.UUID],
    limit: int,
    cursor: str | None,
    *,
    newest_first: bool,
) -> tuple[Sequence[Row[Any]], str | None]:
    """Up to `limit` rows of `query` by creation time (`created`, then `ident` between equal times),
    newest or oldest first, after the one the cursor names; and the cursor of the next page, if any."""
    if cursor is not None:
        at, last = after_time(cursor)
        if newest_first:
            query = query.where(or_(created < at, and_(created == at, ident < last)))
        else:
            query = query.where(or_(created > at, and_(created == at, ident > last)))
    order = (created.desc(), ident.desc()) if newest_first else (created, ident)
    rows = (await conn.execute(query.order_by(*order).limit(limit + 1))).all()
    return rows[:limit], time_cursor(rows, limit)


def after_time(cursor: str) -> tuple[dt.datetime, uuid.UUID]:
    """The creation time and id of the last item of the previous page of a list by creation time."""
    after = decode_cursor(cursor)
    if not isinstance(after.get("t"), str) or not isinstance(after.get("id"), str):
        raise ValueError("malformed cursor")
    try:
        at = dt.datetime.fromisoformat(after["t"])
        if at.tzinfo is None:
            raise ValueError("no offset")
        return at.astimezone(dt.UTC), uuid.UUID(after["id"])
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ValueError("malformed cursor") from exc


def time_cursor(rows: Sequence[Any], limit: int) -> str | None:
    """The cursor after the first `limit` of `rows` (read with `limit + 1`), if more follow."""
    if len(rows) <= limit:
        return None
    tail = rows[limit - 1]
    return encode_cursor({"t": tail.created_at.isoformat(), "id": str(tail.id)})
