"""A small synchronous HTTP client for REST v2, for the CLI (stdlib only: no event loop needed).

Problem responses become `ApiError(status, title, detail)`; a server that cannot be reached
becomes `ApiUnreachable`. Neither carries a stack trace to the user. `ApiClient.events()` opens
the server-sent events stream `GET /v2/events`, read by a background thread (`EventStream`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import http.client
import json
import queue
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# No byte for this long (the server sends a keep-alive comment every 15 s): the stream is dead.
STREAM_READ_TIMEOUT = 60.0


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

    def _url(self, path: str, query: Mapping[str, str | int | bool | None] | None) -> str:
        url = self.base_url + path
        params = {
            k: str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in (query or {}).items()
            if v is not None
        }
        if params:
            url += "?" + urllib.parse.urlencode(params)
        return url

    def _headers(self, accept: str) -> dict[str, str]:
        headers = {"Accept": accept}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str | int | bool | None] | None = None,
    ) -> tuple[int, Any]:
        url = self._url(path, query)
        headers = self._headers("application/json")
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

    def events(self, path: str = "/v2/events", **query: str | int | bool | None) -> EventStream:
        """Open a server-sent events stream; `StreamUnavailable` when that is not possible (an
        older server without the endpoint, a proxy that answers something else, no connection)."""
        req = urllib.request.Request(
            self._url(path, query), method="GET", headers=self._headers("text/event-stream")
        )
        try:
            resp = urllib.request.urlopen(req, timeout=STREAM_READ_TIMEOUT)
        except urllib.error.HTTPError as exc:
            problem = _problem(exc.code, exc.reason, exc.read())
            exc.close()
            raise StreamUnavailable(f"HTTP {exc.code}: {problem.title}: {problem.detail}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise StreamUnavailable(f"cannot open the event stream: {getattr(exc, 'reason', exc)}") from None
        content_type = resp.headers.get("Content-Type", "")
        if not content_type.startswith("text/event-stream"):
            resp.close()
            raise StreamUnavailable(f"the server answered {content_type or 'no content type'}, not events")
        return EventStream(resp)


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


class StreamUnavailable(Exception):
    """The event stream could not be opened; the caller falls back to polling."""


class StreamEnded(Exception):
    """The event stream closed or broke; what was read before it is still delivered."""


@dataclass(frozen=True)
class SseMessage:
    event: str
    data: str

    def json(self) -> Any:
        return json.loads(self.data)


class EventStream:
    """An open `text/event-stream` response, parsed by a daemon thread into `SseMessage`s.

    `get(timeout)` answers the next message, or None when none came in `timeout` seconds (so the
    caller can do other work in between); it raises `StreamEnded` once the stream is over.
    `opened_at` is the server's time when it answered (its Date header), or ours without one.
    """

    def __init__(self, resp: http.client.HTTPResponse) -> None:
        self._resp = resp
        self._queue: queue.Queue[SseMessage | StreamEnded] = queue.Queue()
        self._closed = threading.Event()
        self.opened_at = _server_time(resp.headers.get("Date"))
        self._thread = threading.Thread(target=self._read, name="sse-reader", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        event = "message"
        data: list[str] = []
        reason = "the server closed the event stream"
        try:
            while not self._closed.is_set():
                raw = self._resp.readline()
                if not raw:
                    break
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if line == "":
                    if data:
                        self._queue.put(SseMessage(event, "\n".join(data)))
                    event, data = "message", []
                    continue
                if line.startswith(":"):  # a comment: the keep-alive
                    continue
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "event":
                    event = value
                elif name == "data":
                    data.append(value)
        except Exception as exc:  # a timeout, a reset, a close() from the other thread
            reason = f"the event stream broke: {type(exc).__name__}: {exc}"
        finally:
            self._queue.put(StreamEnded(reason))
            with contextlib.suppress(Exception):
                self._resp.close()

    def get(self, timeout: float) -> SseMessage | None:
        try:
            item = self._queue.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if isinstance(item, StreamEnded):
            self._queue.put(item)  # every later get() says so too
            raise item
        return item

    def close(self) -> None:
        """Stop reading: shut the socket down so the reader thread wakes up and ends."""
        if self._closed.is_set():
            return
        self._closed.set()
        raw = getattr(getattr(self._resp, "fp", None), "raw", None)
        sock = getattr(raw, "_sock", None)
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=2.0)

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _server_time(header: str | None) -> dt.datetime:
    if header:
        with contextlib.suppress(TypeError, ValueError):
            stamp = email.utils.parsedate_to_datetime(header)
            if stamp.tzinfo is not None:
                return stamp
    return dt.datetime.now(dt.UTC)
