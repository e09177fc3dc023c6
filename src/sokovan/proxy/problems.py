"""The proxy's own errors as RFC 9457 problem documents (`application/problem+json`), like the API's."""

from __future__ import annotations

import json

from aiohttp import web

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_BASE = "https://sokovan.dev/problems/"


def problem(status: int, title: str, detail: str) -> web.Response:
    body = {
        "type": PROBLEM_BASE + title.lower().replace(" ", "-"),
        "title": title,
        "status": status,
        "detail": detail,
    }
    return web.Response(status=status, text=json.dumps(body), content_type=PROBLEM_CONTENT_TYPE)
