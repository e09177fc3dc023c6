"""Following a session (`create --wait`, `watch`): the event stream first, polling when there is
none, every transition printed once, until the session ends or reaches the status the caller
stops at (`stop_at`: RUNNING for `create --wait` of a session that is not a batch job, `watch
--until`)."""

from __future__ import annotations

import datetime as dt
import sys
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

import click

from sokovan.cli.client import (
    ApiClient,
    EventStream,
    SseMessage,
    StreamEnded,
    StreamUnavailable,
)
from sokovan.cli.preemption_view import preempted_event


def session_path(session_id: str) -> str:
    return "/v2/sessions/" + str(urllib.parse.quote(session_id, safe=""))


POLL_INTERVAL = 0.2  # without an event stream: how often --wait polls the session
RESYNC_INTERVAL = 2.0  # with one: how often the session is re-read all the same
MAX_REOPENS = 5  # event streams that broke and were reopened before falling back to polling
OVERLAP_SKEW = dt.timedelta(seconds=2)  # clock skew allowed between the server and the history
DEDUP_WINDOW = 10.0  # seconds: a history row and an event this close are one transition
CATCH_UP_TRIES = 10  # reads of the session after the event that ended the wait
TERMINAL = frozenset({"TERMINATED", "ERROR", "CANCELLED"})
# The way to RUNNING, in order: stopping at one of these also stops at any later one of them (a
# session may pass PULLING without stopping there). TERMINATING stops only at itself.
FORWARD = ("PENDING", "SCHEDULED", "PREPARING", "PULLING", "PREPARED", "CREATING", "RUNNING")


def reached(status: str | None, stop_at: str | None) -> bool:
    """Whether a session in `status` is done being followed: it ended, or it is at `stop_at` (or
    past it on the way to RUNNING). `stop_at` None follows to the end."""
    if status in TERMINAL:
        return True
    if stop_at is None or status is None:
        return False
    if status in FORWARD and stop_at in FORWARD:
        return FORWARD.index(status) >= FORWARD.index(stop_at)
    return status == stop_at


def follow(
    client: ApiClient, session_id: str, *, err: bool, stop_at: str | None = "RUNNING"
) -> dict[str, Any]:
    """Follow until terminal or `stop_at` (`reached`), printing every transition.

    The event stream is opened first, then the transitions already in the scheduling history are
    printed, then those the stream brings as they happen, so none is missed or printed twice.
    The session is also re-read every `RESYNC_INTERVAL` seconds (a pending reason that changed,
    an event the live stream lost); without a stream (an older server, a proxy) it is polled
    every `POLL_INTERVAL` seconds instead, as before.
    """
    follower = _Follower(client, session_id, err=err, stop_at=stop_at)
    return run_follower(follower, follower.run, "session")


T = TypeVar("T")


class StreamFollower:
    """The event stream a follower reads (`client.events(**filters)`): opened first, reopened when
    it breaks, up to `MAX_REOPENS` times, and after that (or when there is none) polling."""

    def __init__(self, client: ApiClient, *, err: bool, **filters: str) -> None:
        self._client = client
        self._err = err
        self._filters = filters
        self._stream: EventStream | None = None
        self._reopens = 0

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _open(self) -> None:
        try:
            self._stream = self._client.events(**self._filters)
        except StreamUnavailable:
            self._stream = None

    def _broken(self) -> None:
        """The stream ended: close it, and reopen it unless it has been reopened often enough."""
        self.close()
        if self._reopens < MAX_REOPENS:
            self._reopens += 1
            self._open()


def run_follower(follower: StreamFollower, run: Callable[[], T], what: str) -> T:
    """`run()`, closing the follower's stream after it; Ctrl-C stops following (exit 130)."""
    try:
        return run()
    except KeyboardInterrupt:
        click.echo(f"stopped following; the {what} goes on", err=True)
        sys.exit(130)
    finally:
        follower.close()


Transition = tuple[str, str]


class _Follower(StreamFollower):
    def __init__(self, client: ApiClient, session_id: str, *, err: bool, stop_at: str | None) -> None:
        super().__init__(client, err=err, session_id=session_id)
        self._sid = session_id
        self._stop_at = stop_at
        # History rows at or after this may come on the stream as well (None: no stream yet).
        self._overlap_since: dt.datetime | None = None
        self._rows_seen = 0
        self._last_reason: str | None = None
        # Printed from one source, maybe still to come from the other: (transition, time).
        self._from_history: list[tuple[Transition, dt.datetime | None]] = []
        self._from_stream: list[tuple[Transition, dt.datetime | None]] = []

    def _done(self, status: str | None) -> bool:
        return reached(status, self._stop_at)

    def _echo(self, text: str) -> None:
        click.echo(text, err=self._err)

    def run(self) -> dict[str, Any]:
        self._open()
        while True:
            current = self._resync()
            if self._done(current["status"]):
                return self._finish(current)
            deadline = time.monotonic() + (RESYNC_INTERVAL if self._stream else POLL_INTERVAL)
            while self._stream is not None and (left := deadline - time.monotonic()) > 0:
                try:
                    message = self._stream.get(left)
                except StreamEnded:
                    self._broken()
                    break  # re-read at once: something may have happened while it was down
                if message is None:
                    break
                status = self._on_event(message)
                if self._done(status):
                    return self._finish_after_event(str(status))
            if self._stream is None:
                time.sleep(max(0.0, deadline - time.monotonic()))

    def _open(self) -> None:
        super()._open()
        if self._stream is None:
            return
        # Rows written a little before the server answered may still be on their way as events.
        since = self._stream.opened_at - OVERLAP_SKEW
        self._overlap_since = since if self._overlap_since is None else min(self._overlap_since, since)

    def _resync(self) -> dict[str, Any]:
        current: dict[str, Any] = self._client.get(session_path(self._sid))
        rows = self._client.paged(session_path(self._sid) + "/history", limit=500)
        for row in rows[self._rows_seen :]:
            src, dst = row.get("from_status"), row.get("to_status")
            if not src or not dst or src == dst:
                continue
            at = _parse_time(row.get("created_at"))
            if _take((src, dst), at, self._from_stream):
                continue  # already printed from the stream
            self._echo(f"{_clock(row.get('created_at'))}  {src} -> {dst}  ({row['handler']})")
            if self._overlap_since is not None and (at is None or at >= self._overlap_since):
                self._from_history.append(((src, dst), at))
        self._rows_seen = len(rows)
        status = current["status"]
        info = current.get("status_info") or {}
        reason = info.get("pending_reason") if status == "PENDING" else None
        if reason and reason != self._last_reason:
            self._echo(f"{dt.datetime.now():%H:%M:%S}  PENDING  {reason}")
        self._last_reason = reason
        return current

    def _on_event(self, message: SseMessage) -> str | None:
        """Print a session.status or session.preempted event; the status it reached (None for
        other events)."""
        if message.event not in ("session.status", "session.preempted"):
            return None
        try:
            data = message.json()
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        if message.event == "session.preempted":
            line = preempted_event(data)
            if line is not None:
                self._echo(f"{_clock(data.get('at'))}  {line}")
            return None
        src, dst = data.get("from"), data.get("to")
        detail: dict[str, Any] = data["detail"] if isinstance(data.get("detail"), dict) else {}
        reason = detail.get("pending_reason") or None
        if not isinstance(dst, str):
            return None
        if not isinstance(src, str) or src == dst:  # no move: maybe a new reason to wait
            if dst == "PENDING" and reason and reason != self._last_reason:
                self._echo(f"{_clock(data.get('at'))}  PENDING  {reason}")
                self._last_reason = reason
            return dst
        at = _parse_time(data.get("at"))
        if not _take((src, dst), at, self._from_history):
            line = f"{_clock(data.get('at'))}  {src} -> {dst}"
            if dst == "PENDING" and reason:
                line += f"  {reason}"
            elif detail.get("handler"):
                line += f"  ({detail['handler']})"
            self._echo(line)
            self._from_stream.append(((src, dst), at))
        self._last_reason = reason if dst == "PENDING" else None
        return dst

    def _finish(self, current: dict[str, Any]) -> dict[str, Any]:
        self._echo(f"{dt.datetime.now():%H:%M:%S}  {_describe(current)}")
        return current

    def _finish_after_event(self, status: str) -> dict[str, Any]:
        """The session as the API shows it now; it reached `status` before the event was sent."""
        current: dict[str, Any] = {}
        for attempt in range(CATCH_UP_TRIES):
            if attempt:
                time.sleep(POLL_INTERVAL)
            current = self._client.get(session_path(self._sid))
            if self._done(current["status"]):
                return self._finish(current)
        # A reader that lags behind the writer: trust the event.
        return self._finish({**current, "status": status})


def _take(
    transition: Transition, at: dt.datetime | None, pending: list[tuple[Transition, dt.datetime | None]]
) -> bool:
    """Remove and confirm the first `pending` entry that is the same transition at about `at`."""
    for i, (other, other_at) in enumerate(pending):
        if other != transition:
            continue
        if at is None or other_at is None or abs((at - other_at).total_seconds()) <= DEDUP_WINDOW:
            del pending[i]
            return True
    return False


def _parse_time(value: Any) -> dt.datetime | None:
    try:
        stamp = dt.datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=dt.UTC)


def _clock(value: Any) -> str:
    """HH:MM:SS of an API timestamp, in local time."""
    stamp = _parse_time(value)
    if stamp is None:
        return str(value)[11:19]
    return f"{stamp.astimezone():%H:%M:%S}"


def _describe(s: dict[str, Any]) -> str:
    status = s["status"]
    info = s.get("status_info") or {}
    if status == "PENDING":
        return f"PENDING  {info['pending_reason']}" if info.get("pending_reason") else "PENDING"
    if status in TERMINAL:
        parts = [status]
        if s.get("result"):
            parts.append(f"result={s['result']}")
        if info.get("cause"):
            parts.append(f"cause={info['cause']}")
        if info.get("message"):
            parts.append(f"({info['message']})")
        return "  ".join(parts)
    return str(status)


def exit_code(s: dict[str, Any]) -> int:
    """0 for a session still on its way (followed to where the caller stopped) or one that ended
    TERMINATED with result SUCCESS or none; 1 for any other end."""
    if s["status"] not in TERMINAL:
        return 0
    if s["status"] == "TERMINATED" and s.get("result") in (None, "SUCCESS"):
        return 0
    return 1
