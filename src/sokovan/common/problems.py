"""Errors as RFC 9457 problem documents (`application/problem+json`): one shape for the API and
the app proxy."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_BASE = "https://sokovan.dev/problems/"


def problem_response(
    status: int,
    title: str,
    detail: str,
    *,
    slug: str | None = None,
    errors: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body: dict[str, Any] = {
        "type": PROBLEM_BASE + (slug or title.lower().replace(" ", "-")),
        "title": title,
        "status": status,
        "detail": detail,
    }
    if errors:
        body["errors"] = errors
    return web.Response(
        status=status, text=json.dumps(body), content_type=PROBLEM_CONTENT_TYPE, headers=headers
    )
