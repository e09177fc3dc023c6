"""Conditional GETs: every 200 answer to a GET carries an `ETag`, and a request whose
`If-None-Match` names it is answered `304 Not Modified` with no body.

A dashboard polling `GET /v2/sessions` every few seconds then moves (and parses) a page only when
something on it changed. The tag is a weak one, a hash of the body (BLAKE2b, 128 bits): two
answers with the same bytes have the same tag, whichever worker of the manager made them. A
handler may tag its answer itself (`GET /v2/agents`, `agent_pages`: a tag that leaves heartbeats
out); the tag it set is the one compared.
"""

from __future__ import annotations

import hashlib

from aiohttp import web
from aiohttp.typedefs import Handler


def etag_of(body: bytes) -> str:
    return 'W/"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'


def names_match(header: str, tag: str) -> bool:
    """Whether an `If-None-Match` value names `tag` (weak comparison) or is `*`."""
    names = {part.strip() for part in header.split(",") if part.strip()}
    return header.strip() == "*" or tag in names or tag.removeprefix("W/") in names


@web.middleware
async def conditional_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    if (
        request.method not in ("GET", "HEAD")
        or response.status != 200
        or not isinstance(response, web.Response)
    ):
        return response
    tag = response.headers.get("ETag")  # a handler that tags its own answers (agent_pages)
    if tag is None:
        body = response.body
        if not isinstance(body, bytes):
            return response
        tag = etag_of(body)
        response.headers["ETag"] = tag
    wanted = request.headers.get("If-None-Match")
    if wanted is not None and names_match(wanted, tag):
        not_modified = web.Response(status=304, headers={"ETag": tag})
        for name in ("Cache-Control", "Vary"):
            if name in response.headers:
                not_modified.headers[name] = response.headers[name]
        return not_modified
    return response
