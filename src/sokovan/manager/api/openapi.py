"""Routes are declared once, with their models, and both the router and the OpenAPI 3.1
document are built from that declaration, so the document lists exactly what is served."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal

from pydantic import BaseModel

from sokovan.manager.api.schemas import ProblemDetails

REF = "#/components/schemas/{model}"
Handler = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class Param:
    name: str
    where: Literal["path", "query"]
    description: str
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "string"})
    required: bool = False


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    summary: str
    # None: no body (a problem document for 4xx/5xx); a tuple: one of these models
    responses: dict[int, type[BaseModel] | tuple[type[BaseModel], ...] | None]
    request: type[BaseModel] | None = None
    # False: the body may be left out (the model's defaults apply)
    body_required: bool = True
    params: Sequence[Param] = ()
    auth: bool = True
    admin: bool = False
    # The media type of the success responses (`text/event-stream` for `GET /v2/events`: each
    # message's data is one instance of the response model; `text/plain` for `/metrics`).
    media_type: str = "application/json"


SESSION_ID = Param("id", "path", "session id (UUID)", {"type": "string", "format": "uuid"}, True)


def build_document(routes: Sequence[Route], version: str) -> dict[str, Any]:
    schemas: dict[str, Any] = {}

    def ref(model: type[BaseModel], mode: Literal["validation", "serialization"]) -> dict[str, str]:
        schema = model.model_json_schema(ref_template=REF, mode=mode)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
        return {"$ref": REF.format(model=model.__name__)}

    problem = ref(ProblemDetails, "serialization")
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        op: dict[str, Any] = {
            "summary": route.summary,
            "operationId": f"{route.method.lower()}_{route.handler.__name__}",
            "parameters": [
                {
                    "name": p.name,
                    "in": p.where,
                    "required": p.required or p.where == "path",
                    "description": p.description,
                    "schema": p.schema,
                }
                for p in route.params
            ],
            "responses": {},
        }
        if route.request is not None:
            op["requestBody"] = {
                "required": route.body_required,
                "content": {"application/json": {"schema": ref(route.request, "validation")}},
            }
        for status, model in route.responses.items():
            entry: dict[str, Any] = {"description": _reason(status)}
            media = route.media_type if status < 400 else "application/json"
            if isinstance(model, tuple):
                one_of = [ref(m, "serialization") for m in model]
                entry["content"] = {media: {"schema": {"oneOf": one_of}}}
            elif model is not None:
                entry["content"] = {media: {"schema": ref(model, "serialization")}}
            elif status >= 400:
                entry["content"] = {"application/problem+json": {"schema": problem}}
            elif media != "application/json":
                entry["content"] = {media: {"schema": {"type": "string"}}}
            op["responses"][str(status)] = entry
        # 400: a malformed parameter or body (or NUL anywhere); 403: the caller's role may not do
        # this (an admin's route, another user's listing, a raised priority); 413: a body past 1 MiB.
        errors = [400, 401, 403, 404, 422, 500] if route.auth else [400, 500]
        if route.request is not None:
            errors.append(413)
        for status in errors:
            admins_only = ": admins only" if route.admin and status == 403 else ""
            op["responses"].setdefault(
                str(status),
                {
                    "description": _reason(status) + admins_only,
                    "content": {"application/problem+json": {"schema": problem}},
                },
            )
        if route.auth:
            op["security"] = [{"bearer": []}]
        paths.setdefault(route.path, {})[route.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Sokovan REST v2", "version": version},
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _reason(status: int) -> str:
    return HTTPStatus(status).phrase
