"""The proxy's own errors as RFC 9457 problem documents (`application/problem+json`), like the API's."""

from __future__ import annotations

from aiohttp import web

from sokovan.common.problems import problem_response


def problem(status: int, title: str, detail: str, headers: dict[str, str] | None = None) -> web.Response:
    return problem_response(status, title, detail, headers=headers)
