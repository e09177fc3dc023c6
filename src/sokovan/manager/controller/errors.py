"""What a controller refuses, as data the API turns into problem+json responses."""

from __future__ import annotations

from typing import Any, ClassVar


class ControllerError(Exception):
    """A request the controller refuses; nothing was written."""

    status: ClassVar[int] = 400
    slug: ClassVar[str] = "bad-request"
    title: ClassVar[str] = "Bad request"

    def __init__(self, detail: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors


class UnknownReference(ControllerError):
    """The request names something that does not exist: scaling group, image, session, domain."""

    status = 422
    slug = "unknown-reference"
    title = "Unknown reference"


class Unsatisfiable(ControllerError):
    """The request is well formed but no agent of the scaling group could ever hold it."""

    status = 422
    slug = "unsatisfiable"
    title = "Request can never be satisfied"


class NotFound(ControllerError):
    """The target does not exist or is not the caller's (the two are not told apart)."""

    status = 404
    slug = "not-found"
    title = "Not found"


class QuotaExceeded(ControllerError):
    """The request alone is more than a defined quota allows: it could never be placed."""

    status = 422
    slug = "quota-exceeded"
    title = "Quota exceeded"


class TooManyPending(ControllerError):
    """The owner already has as many PENDING sessions as its policy allows: try again later."""

    status = 429
    slug = "too-many-pending-sessions"
    title = "Too many pending sessions"


class ValidationFailed(ControllerError):
    """A field is wrong in a way only its neighbours tell (e.g. a deployment type without its model);
    `errors` names the field, as pydantic's field errors do."""

    status = 422
    slug = "validation-failed"
    title = "Validation failed"


class Conflict(ControllerError):
    """The request clashes with the current state: a live name taken, a deployment being destroyed."""

    status = 409
    slug = "conflict"
    title = "Conflict"
