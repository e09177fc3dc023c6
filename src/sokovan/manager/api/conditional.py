"""Conditional GETs: every 200 answer to a GET carries an `ETag`, and a request whose
`If-None-Match` names it is answered `304 Not Modified` with no body.

A dashboard polling `GET /v2/agents` every few seconds then moves (and parses) a page only when
something on it changed. The tag is a weak one, a hash of the body (BLAKE2b, 128 bits): two
answers with the same bytes have the same tag, whichever worker of the manager made them.
"""

from __future__ import annotations

import hashlib

from aiohttp import web
from aiohttp.typedefs import Handler


def etag_of(body: bytes) -> str:
    return 'W/"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'


def _names(header: str) -> set[str]:
    return {part.strip() for part in header.split(",") if part.strip()}


@web.middleware
async def conditional_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    if (
        request.method not in ("GET", "HEAD")
        or response.status != 200
        or not isinstance(response, web.Response)
    ):
        return response
    body = response.body
    if not isinstance(body, bytes):
        return response
    tag = etag_of(body)
    response.headers["ETag"] = tag
    wanted = request.headers.get("If-None-Match")
    if wanted is not None and (tag in _names(wanted) or wanted.strip() == "*"):
        not_modified = web.Response(status=304, headers={"ETag": tag})
        for name in ("Cache-Control", "Vary"):
            if name in response.headers:
                not_modified.headers[name] = response.headers[name]
        return not_modified
    return response
