"""What a controller refuses, as data the API turns into problem+json responses."""

from __future__ import annotations

from typing import Any, ClassVar


class ControllerError(Exception):
    """A request the controller refuses; nothing was written."""

    status: ClassVar[int] = 400
    slug: ClassVar[str] = "bad-request"
    title: ClassVar[str] = "Bad request"

    def __init_subclass__(cls, *, status: int, slug: str, title: str) -> None:
        """A kind of refusal: its HTTP status, the slug of its problem type, and its title."""
        super().__init_subclass__()
        cls.status, cls.slug, cls.title = status, slug, title

    def __init__(self, detail: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors


class UnknownReference(ControllerError, status=422, slug="unknown-reference", title="Unknown reference"):
    """The request names something that does not exist: scaling group, image, session, domain."""


class Unsatisfiable(
    ControllerError, status=422, slug="unsatisfiable", title="Request can never be satisfied"
):
    """The request is well formed but no agent of the scaling group could ever hold it."""


class NotFound(ControllerError, status=404, slug="not-found", title="Not found"):
    """The target does not exist or is not the caller's (the two are not told apart)."""


class QuotaExceeded(ControllerError, status=422, slug="quota-exceeded", title="Quota exceeded"):
    """The request alone is more than a defined quota allows: it could never be placed."""


class TooManyPending(
    ControllerError, status=429, slug="too-many-pending-sessions", title="Too many pending sessions"
):
    """The owner already has as many PENDING sessions as its policy allows: try again later."""


class ValidationFailed(ControllerError, status=422, slug="validation-failed", title="Validation failed"):
    """A field is wrong in a way only its neighbours tell (e.g. a deployment type without its model);
    `errors` names the field, as pydantic's field errors do."""


class Conflict(ControllerError, status=409, slug="conflict", title="Conflict"):
    """The request clashes with the current state: a live name taken, a deployment being destroyed."""


class Forbidden(ControllerError, status=403, slug="forbidden", title="Forbidden"):
    """The caller's role may not ask for this (e.g. a user raising a session's priority)."""
