"""A session by what a caller calls it (CONTRACT section 17): its id, its name, or an id prefix.

- A full UUID is an id, as it always was (`get_session` and friends read it directly).
- A name names the caller's one non-terminal session of that name; when none is live, its newest
  terminal one. Two or more live ones are ambiguous.
- A prefix of the id's text, at least `MIN_PREFIX` hexadecimal digits (dashes where the UUID text
  has them, any case), names the one session of the caller whose id starts with it, live or not;
  two or more are ambiguous. A name that matches comes first.

"The caller's" is what `sessions_read.visible` lets it see: a user its own sessions, an admin
every owner's. Another owner's name or prefix names nothing, like one that does not exist.

`resolve` is one statement: an index probe on `(name, user_id, created_at)` (migration 0014) for
each name branch and a primary-key range scan (`id BETWEEN prefix-000… AND prefix-fff…`) for the
prefix, each branch bounded by a LIMIT.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Select, literal, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.types import SessionStatus
from sokovan.db.models import Session
from sokovan.manager.repositories.sessions_read import visible
from sokovan.manager.repositories.tenancy import Principal

MIN_PREFIX = 8  # hexadecimal digits of an id prefix
MAX_CANDIDATES = 10  # ids listed for an ambiguous reference
# What a session's name can be: `session_spec.NAME_PATTERN` (what a create takes; the defaults
# `s-<8 hex>` and `<deployment>-<8 hex>` fit it too). Anything else names no session by its name
# and costs no read.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

_HEX = frozenset("0123456789abcdef")
_LIVE, _ENDED, _PREFIX = 1, 2, 3  # the branches of the lookup, in the order they count
_TERMINAL = sorted(s.value for s in SessionStatus.terminal())
_NON_TERMINAL = sorted(s.value for s in SessionStatus.non_terminal())


def full_id(ref: str) -> uuid.UUID | None:
    """`ref` as a session id when it is a whole UUID (any form `uuid.UUID` reads), else None."""
    try:
        return uuid.UUID(ref)
    except ValueError:
        return None


def id_range(ref: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The lowest and highest id whose text starts with `ref`, when `ref` is an id prefix: 8 to 31
    hexadecimal digits, any case, with dashes (if any) where the UUID text has them; else None."""
    text = ref.lower()
    digits = text.replace("-", "")
    if not MIN_PREFIX <= len(digits) < 32 or not set(digits) <= _HEX:
        return None
    low = uuid.UUID(digits.ljust(32, "0"))
    if text != digits and not str(low).startswith(text):
        return None  # dashes, but not where the UUID text has them
    return low, uuid.UUID(digits.ljust(32, "f"))


@dataclass(frozen=True)
class Resolved:
    """What a reference names: `session_id` when it names one session; else the `candidates` it
    could mean (none: it names nothing the caller may see; several: it is ambiguous)."""

    session_id: uuid.UUID | None
    candidates: tuple[uuid.UUID, ...] = ()
    by: Literal["id", "name", "prefix"] | None = None
    more: bool = False  # there are more candidates than listed


def lookup_query(ref: str, principal: Principal) -> Select[Any] | None:
    """The one statement that finds what `ref` (not a whole UUID) may name, or None when it can name
    nothing (neither a possible name nor an id prefix). Rows: `id, created_at, branch`."""
    may_see = visible(principal)
    branches: list[Select[Any]] = []
    if NAME_RE.fullmatch(ref):
        by_name = select(Session.id, Session.created_at).where(Session.name == ref, may_see)
        branches.append(
            by_name.add_columns(literal(_LIVE).label("branch"))
            .where(Session.status.in_(_NON_TERMINAL))
            .order_by(Session.created_at.desc())
            .limit(MAX_CANDIDATES + 1)
        )
        branches.append(
            by_name.add_columns(literal(_ENDED).label("branch"))
            .where(Session.status.in_(_TERMINAL))
            .order_by(Session.created_at.desc())
            .limit(1)
        )
    bounds = id_range(ref)
    if bounds is not None:
        branches.append(
            select(Session.id, Session.created_at)
            .add_columns(literal(_PREFIX).label("branch"))
            .where(Session.id.between(*bounds), may_see)
            .order_by(Session.id)
            .limit(MAX_CANDIDATES + 1)
        )
    if not branches:
        return None
    if len(branches) == 1:
        return branches[0]
    found = union_all(*branches).subquery()
    return select(found).order_by(found.c.branch, found.c.created_at.desc(), found.c.id)


async def resolve(conn: AsyncConnection, ref: str, principal: Principal) -> Resolved:
    """The session `ref` names among those `principal` may see (the module's rules)."""
    exact = full_id(ref)
    if exact is not None:
        return Resolved(exact, by="id")
    query = lookup_query(ref, principal)
    if query is None:
        return Resolved(None)
    rows = (await conn.execute(query)).all()
    live = [r.id for r in rows if r.branch == _LIVE]
    ended = [r.id for r in rows if r.branch == _ENDED]
    prefixed = [r.id for r in rows if r.branch == _PREFIX]
    if live:
        return _one_of(live, "name")
    if ended:
        return Resolved(ended[0], by="name")
    if prefixed:
        return _one_of(prefixed, "prefix")
    return Resolved(None)


def _one_of(ids: list[uuid.UUID], by: Literal["name", "prefix"]) -> Resolved:
    if len(ids) == 1:
        return Resolved(ids[0], by=by)
    return Resolved(None, tuple(ids[:MAX_CANDIDATES]), by=by, more=len(ids) > MAX_CANDIDATES)
