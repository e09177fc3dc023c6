"""The session a request names (CONTRACT section 17): by id, by name, or by an id prefix.

Every `/v2/sessions/{id}…` handler reads its `{id}` through `path_session_id`, and
`GET /v2/events?session_id=` through `query_session_id`; the rules are
`repositories.session_lookup`'s. A reference that names nothing the caller may see is 404 (for a
path; 400 for the query parameter, as a malformed one always was), exactly as an unknown id; an
ambiguous one is 409 problem+json whose `candidates` lists the ids it could mean.
"""

from __future__ import annotations

import json
import uuid

from aiohttp import web

from sokovan.common.problems import PROBLEM_BASE, PROBLEM_CONTENT_TYPE
from sokovan.manager.api.auth import CTX_KEY
from sokovan.manager.api.openapi import Param
from sokovan.manager.api.problems import Problem
from sokovan.manager.repositories import session_lookup
from sokovan.manager.repositories.session_lookup import MIN_PREFIX, Resolved
from sokovan.manager.repositories.tenancy import Principal

SESSION_REF = Param(
    "id",
    "path",
    f"session id, name, or id prefix of {MIN_PREFIX}+ hex characters (a name: the caller's live "
    "session of that name, else its newest ended one; 409 with `candidates` when ambiguous)",
    {"type": "string"},
    True,
)
SESSION_REF_QUERY = Param(
    "session_id",
    "query",
    f"only the events of this session: its id, name, or id prefix of {MIN_PREFIX}+ hex characters",
    {"type": "string"},
)


class AmbiguousSession(Problem):
    """409: a name or id prefix that names more than one session; `candidates` lists their ids."""

    def __init__(self, ref: str, found: Resolved) -> None:
        what = "live sessions are named" if found.by == "name" else "sessions have ids starting with"
        listed = ", ".join(str(c) for c in found.candidates) + (", …" if found.more else "")
        super().__init__(
            409,
            "Ambiguous session",
            f"{len(found.candidates)}{'+' if found.more else ''} {what} {ref!r}: {listed}",
            slug="ambiguous-session",
        )
        self.candidates = [str(c) for c in found.candidates]

    def response(self) -> web.Response:
        body = {
            "type": PROBLEM_BASE + self.slug,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "candidates": self.candidates,
        }
        return web.Response(status=self.status, text=json.dumps(body), content_type=PROBLEM_CONTENT_TYPE)


async def resolve(request: web.Request, ref: str, principal: Principal) -> Resolved:
    """What `ref` names among the sessions `principal` may see; 409 when it is ambiguous.

    A whole UUID costs no statement here: the handler's own read finds it or answers 404."""
    exact = session_lookup.full_id(ref)
    if exact is not None:
        return Resolved(exact, by="id")
    async with request.app[CTX_KEY].engine.connect() as conn:
        found = await session_lookup.resolve(conn, ref, principal)
    if found.candidates:
        raise AmbiguousSession(ref, found)
    return found


async def path_session_id(request: web.Request, principal: Principal, name: str = "id") -> uuid.UUID:
    """The session the path's `{id}` names: 404 when it names none the caller may see."""
    ref = request.match_info[name]
    found = await resolve(request, ref, principal)
    if found.session_id is None:
        raise Problem(404, "Not found", f"no session {ref!r}", slug="not-found")
    return found.session_id


async def query_session_id(
    request: web.Request, principal: Principal, name: str = "session_id"
) -> str | None:
    """The session the query parameter `name` names, as the id text events carry; None when it is
    absent. A whole UUID is taken as it is (a filter: no read); anything else must name a session
    the caller may see (400 when it names none, 409 when it is ambiguous)."""
    ref = request.query.get(name)
    if ref is None or ref == "":
        return None
    found = await resolve(request, ref, principal)
    if found.session_id is None:
        raise Problem(
            400,
            "Bad query parameter",
            f"{name} must be a session id, name or id prefix of {MIN_PREFIX}+ hex characters; "
            f"{ref[:140]!r} names no session",
        )
    return str(found.session_id)
