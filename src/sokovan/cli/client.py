"""A small synchronous HTTP client for REST v2, for the CLI (stdlib only: no event loop needed).

Problem responses become `ApiError(status, title, detail)`; a server that cannot be reached
becomes `ApiUnreachable`. Neither carries a stack trace to the user.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any


class ApiError(Exception):
    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(f"{title}: {detail}")
        self.status = status
        self.title = title
        self.detail = detail


class ApiUnreachable(Exception):
    """The API did not answer at all (connection refused, DNS, timeout)."""


class ApiClient:
    def __init__(self, base_url: str, token: str | None, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str | int | bool | None] | None = None,
    ) -> tuple[int, Any]:
        url = self.base_url + path
        params = {
            k: str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in (query or {}).items()
            if v is not None
        }
        if params:
            url += "?" + urllib.parse.urlencode(params)
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as exc:
            raise _problem(exc.code, exc.reason, exc.read()) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiUnreachable(f"cannot reach the API at {self.base_url}: {reason}") from None

    def get(self, path: str, **query: str | int | bool | None) -> Any:
        return self.request("GET", path, query=query)[1]

    def paged(self, path: str, **query: str | int | bool | None) -> list[Any]:
        """Every item of a cursor-paginated list."""
        items: list[Any] = []
        cursor: str | None = None
        while True:
            page = self.get(path, **query, cursor=cursor)
            items.extend(page.get("items", []))
            cursor = page.get("next_cursor")
            if not cursor:
                return items


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def _problem(status: int, reason: str, raw: bytes) -> ApiError:
    body = _decode(raw)
    if isinstance(body, dict):
        return ApiError(status, str(body.get("title") or reason), str(body.get("detail") or ""))
    return ApiError(status, reason or f"HTTP {status}", str(body or "")[:500])
