"""503 for a request that needs a service that is away.

A request that fails because PostgreSQL, Redis or etcd cannot be reached (`common.outages`) is
answered `503 Service Unavailable` (problem+json, `Retry-After`), never a 500: the client may retry
the same request (a create with the same `creation_id` is idempotent). Sits inside the problem
middleware and outside authentication, which reads the database too.
"""

from __future__ import annotations

import asyncio

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from sokovan.common.outages import is_outage
from sokovan.common.problems import problem_response
from sokovan.common.supervise import describe

log = structlog.get_logger(__name__)

RETRY_AFTER = 2  # seconds


def unavailable_response() -> web.Response:
    return problem_response(
        503,
        "Service Unavailable",
        "a service the request needs (database, Redis or etcd) is unreachable; retry later",
        slug="service-unavailable",
        headers={"Retry-After": str(RETRY_AFTER)},
    )


@web.middleware
async def unavailable_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except asyncio.CancelledError:
        raise
    except web.HTTPException:
        raise
    except Exception as exc:
        if not is_outage(exc):
            raise
        log.warning("api.service_unavailable", method=request.method, path=request.path, error=describe(exc))
        return unavailable_response()
