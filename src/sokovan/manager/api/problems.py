"""RFC 9457 problem details: every error the API answers is `application/problem+json`.

Handlers raise `Problem` (or a controller's `ControllerError`); the middleware here turns those,
aiohttp's own HTTP errors (404 unknown route, 405 wrong method, ...) and anything unexpected
(500, logged, never a stack trace in the response) into problem documents.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, TypeVar

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import BaseModel, ValidationError

from sokovan.common.problems import problem_response
from sokovan.manager.api.json_input import InputError, check_text, load_json
from sokovan.manager.controller.errors import ControllerError

log = structlog.get_logger(__name__)


M = TypeVar("M", bound=BaseModel)


class Problem(Exception):
    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        *,
        slug: str | None = None,
        errors: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.slug = slug or title.lower().replace(" ", "-")
        self.errors = errors
        self.headers = headers

    def response(self) -> web.Response:
        return problem_response(
            self.status, self.title, self.detail, slug=self.slug, errors=self.errors, headers=self.headers
        )


def not_found(what: str, ident: object) -> Problem:
    """`<what> <ident> not found`: also what a caller reads of something it may not see."""
    return Problem(404, "Not found", f"{what} {ident} not found", slug="not-found")


# What pydantic puts before the message of a validator that raised ValueError or failed an assert.
_PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")


def plain_message(message: str) -> str:
    """A validation message as the validator wrote it, without pydantic's "Value error, " or
    "Assertion failed, " in front."""
    for prefix in _PYDANTIC_PREFIXES:
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


def validation_problem(exc: ValidationError, where: str = "body") -> Problem:
    errors = [
        {
            "field": ".".join(str(p) for p in err["loc"]) or where,
            "message": plain_message(err["msg"]),
            "type": err["type"],
        }
        for err in exc.errors(include_url=False, include_context=False, include_input=False)
    ]
    summary = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    return Problem(422, "Validation failed", summary, slug="validation-failed", errors=errors)


async def parse_body(request: web.Request, model: type[M]) -> M:
    """The request body as `model`: 400 when it is not JSON or breaks the bounds of `json_input`,
    422 with field errors when invalid. The body is read as JSON whatever its Content-Type says
    (`curl -d` labels it a form).

    Every handler that takes a body reads it here."""
    raw = await request.read()
    try:
        data = load_json(raw) if raw.strip() else None
    except InputError as exc:
        raise Problem(400, "Malformed JSON", str(exc)) from exc
    if data is None:
        raise Problem(400, "Malformed JSON", "the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_problem(exc) from exc


def check_request_text(request: web.Request) -> None:
    """A 400 for NUL in the path or in a query parameter's name or value."""
    try:
        check_text("the path", request.path)
        for name, value in request.query.items():
            check_text("query parameters", name + value)
    except InputError as exc:
        raise Problem(400, "Bad request", str(exc)) from exc


@web.middleware
async def problem_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error as a problem document. The last resort, an unexpected exception, is a 500 that
    names only a reference; the log line with the exception carries the same reference."""
    try:
        check_request_text(request)
        return await handler(request)
    except Problem as problem:
        return problem.response()
    except ControllerError as exc:
        return problem_response(exc.status, exc.title, exc.detail, slug=exc.slug, errors=exc.errors)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        detail = {
            404: f"no resource at {request.path}",
            405: f"{request.method} is not allowed on {request.path}",
        }.get(exc.status, exc.text or exc.reason)
        return problem_response(exc.status, exc.reason, detail, headers=headers)
    except asyncio.CancelledError:
        raise
    except Exception:
        reference = uuid.uuid4().hex[:16]
        log.exception(
            "unhandled error in API handler", method=request.method, path=request.path, reference=reference
        )
        return problem_response(
            500,
            "Internal Server Error",
            f"an unexpected error occurred; it has been logged with reference {reference}",
        )
