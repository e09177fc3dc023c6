"""Small helpers the route modules share: app keys, JSON responses, path and query parsing."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel

from sokovan.manager.api.openapi import Param
from sokovan.manager.api.problems import Problem, not_found
from sokovan.manager.controller import DeploymentController, SchedulingController

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

CONTROLLER_KEY = web.AppKey("scheduling_controller", SchedulingController)
DEPLOYMENTS_KEY = web.AppKey("deployment_controller", DeploymentController)

DEFAULT_LIMIT = 100  # the contract: limit takes 1 to 500, default 100
MAX_LIMIT = 500
# The query parameters of a paged list.
PAGING = (
    Param(
        "limit",
        "query",
        f"page size, 1-{MAX_LIMIT} (default {DEFAULT_LIMIT})",
        {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
    ),
    Param("cursor", "query", "next_cursor of the previous page"),
)


def json_response(model: BaseModel, status: int = 200, *, exclude_none: bool = False) -> web.Response:
    return web.Response(
        status=status,
        text=model.model_dump_json(exclude_none=exclude_none),
        content_type="application/json",
    )


def found(model: type[M], view: Any, what: str, ident: object) -> M:
    """`view` (a row read for the response) as `model`; a 404 for `<what> <ident>` when there is none."""
    if view is None:
        raise not_found(what, ident)
    return model.model_validate(view)


def path_uuid(request: web.Request, name: str = "id", what: str = "session") -> uuid.UUID:
    """A malformed id names nothing: 404, like an id that does not exist."""
    raw = request.match_info[name]
    try:
        return uuid.UUID(raw)
    except ValueError as exc:
        raise Problem(404, "Not found", f"no {what} {raw!r}", slug="not-found") from exc


def query_limit(request: web.Request, default: int = DEFAULT_LIMIT) -> int:
    raw = request.query.get("limit")
    if raw is None:
        return default
    try:
        limit = int(raw)
    except ValueError as exc:
        raise Problem(400, "Bad query parameter", f"limit must be an integer, got {raw!r}") from exc
    if not 1 <= limit <= MAX_LIMIT:
        raise Problem(400, "Bad query parameter", f"limit must be between 1 and {MAX_LIMIT}")
    return limit


async def read_page(
    request: web.Request, fetch: Callable[[int, str | None], Awaitable[tuple[list[T], str | None]]]
) -> tuple[list[T], str | None]:
    """`fetch(limit, cursor)` with the request's `limit` and `cursor`: one page and the next cursor.

    A cursor `fetch` cannot read (its ValueError) is a 400."""
    limit, cursor = query_limit(request), request.query.get("cursor") or None
    try:
        return await fetch(limit, cursor)
    except ValueError as exc:
        raise Problem(400, "Bad query parameter", f"cursor: {exc}") from exc


def query_bool(request: web.Request, name: str, default: bool = False) -> bool:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"true", "1", "yes", "on"}:
        return True
    if value in {"false", "0", "no", "off"}:
        return False
    raise Problem(400, "Bad query parameter", f"{name} must be true or false, got {raw!r}")


NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


def path_name(request: web.Request, what: str, name: str = "name") -> str:
    """A name a write would create: 422 when it is not a valid name."""
    raw = request.match_info[name]
    if not NAME_RE.match(raw):
        raise Problem(
            422,
            "Validation failed",
            f"{what} name {raw!r} must be 1-64 letters, digits or ._@- and start with a letter or digit",
            slug="validation-failed",
        )
    return raw


def query_csv(request: web.Request, name: str) -> list[str]:
    """A repeatable, comma-separated query parameter as one list."""
    return [v.strip() for raw in request.query.getall(name, []) for v in raw.split(",") if v.strip()]
