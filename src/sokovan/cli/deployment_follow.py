"""Following a deployment until all its replicas serve (`deployment create --wait`), or an update
settles (`deployment update|rollback --wait`): the event stream first (`GET
/v2/events?deployment_id=`), polling when there is none, every deployment and route transition
printed once.

What is printed is the difference between what the follower last knew of the deployment and each
of its routes and what it learns next, from an event or from re-reading the API: an event older
than what is already known (the API was read after it happened) changes nothing, so a transition
seen both ways is printed once. The stream and its reopening are the session follower's
(`session_follow`), with the same intervals.
"""

from __future__ import annotations

import datetime as dt
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from sokovan.cli.client import ApiClient, SseMessage, StreamEnded
from sokovan.cli.session_follow import (
    POLL_INTERVAL,
    RESYNC_INTERVAL,
    StreamFollower,
    _clock,
    _parse_time,
    run_follower,
)


def deployment_path(deployment_id: str) -> str:
    return "/v2/deployments/" + str(urllib.parse.quote(deployment_id, safe=""))


def resolve(client: ApiClient, ref: str) -> str:
    """A deployment id, or the id of the live deployment named `ref`."""
    try:
        return str(uuid.UUID(ref))
    except ValueError:
        pass
    live = [
        d
        for d in client.paged("/v2/deployments", limit=500)
        if d["name"] == ref and d["status"] != "DESTROYED"
    ]
    if not live:
        raise click.ClickException(f"no live deployment named {ref!r}")
    return str(live[0]["id"])


class FollowTimeout(Exception):
    """The deployment did not get there in time; `current` is how it was last seen."""

    def __init__(self, current: dict[str, Any]) -> None:
        super().__init__("timed out")
        self.current = current


def is_done(d: dict[str, Any]) -> bool:
    """READY with every replica HEALTHY, or DESTROYED (it never will be)."""
    status, ready, target = d["status"], d["ready_replicas"], d["replicas"]
    return bool(status == "DESTROYED" or (status == "READY" and ready == target))


def update_settled(revision: int) -> Callable[[dict[str, Any]], bool]:
    """Done following an update to `revision`: READY at it with every replica HEALTHY and no
    rollout left, or it was rolled back (or replaced), or the deployment is DESTROYED."""

    def done(d: dict[str, Any]) -> bool:
        if d["status"] == "DESTROYED" or not at_revision(d, revision):
            return True
        return d["status"] == "READY" and not d.get("rollout") and d["ready_replicas"] == d["replicas"]

    return done


def at_revision(d: dict[str, Any], revision: int) -> bool:
    """`d` runs (or is rolling out) `revision`, not a rollback from it."""
    rollout = d.get("rollout") or {}
    return d.get("revision") == revision and not rollout.get("rolled_back")


def describe(d: dict[str, Any]) -> str:
    line = f"{d['status']}  {d['ready_replicas']}/{d['replicas']} replicas ready"
    rollout = d.get("rollout")
    if rollout:
        way = "rolling back" if rollout.get("rolled_back") else "rolling out"
        line += f"  (revision {rollout['to_revision']} {way} from {rollout['from_revision']})"
    reason = (d.get("status_info") or {}).get("pending_reason")
    return f"{line}  (waiting: {reason})" if reason else line


def follow_deployment(
    client: ApiClient,
    deployment_id: str,
    *,
    err: bool,
    timeout: float,
    until: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """Follow until `until` (default `is_done`) or `timeout` seconds (`FollowTimeout`), printing
    every transition."""
    follower = _Follower(client, deployment_id, err=err, until=until or is_done)
    deadline = time.monotonic() + timeout
    return run_follower(follower, lambda: follower.run(deadline), "deployment")


@dataclass
class _Known:
    status: str
    since: dt.datetime | None  # when it got there, by the server's clock


class _Follower(StreamFollower):
    def __init__(
        self, client: ApiClient, deployment_id: str, *, err: bool, until: Callable[[dict[str, Any]], bool]
    ) -> None:
        super().__init__(client, err=err, deployment_id=deployment_id)
        self._id = deployment_id
        self._until = until
        self._deployment: _Known | None = None
        self._routes: dict[str, _Known] = {}
        self._summary: str | None = None

    def _echo(self, at: Any, text: str) -> None:
        stamp = _clock(at) if at is not None else f"{dt.datetime.now():%H:%M:%S}"
        click.echo(f"{stamp}  {text}", err=self._err)

    def run(self, deadline: float) -> dict[str, Any]:
        self._open()
        while True:
            current = self._resync()
            if self._until(current):
                return current
            if time.monotonic() >= deadline:
                raise FollowTimeout(current)
            until = min(deadline, time.monotonic() + (RESYNC_INTERVAL if self._stream else POLL_INTERVAL))
            while self._stream is not None and (left := until - time.monotonic()) > 0:
                try:
                    message = self._stream.get(left)
                except StreamEnded:
                    self._broken()
                    break  # re-read at once: something may have happened while it was down
                if message is None or self._on_event(message):
                    break  # the deployment moved: re-read it now (maybe it is done)
            if self._stream is None:
                time.sleep(max(0.0, until - time.monotonic()))

    def _resync(self) -> dict[str, Any]:
        current: dict[str, Any] = self._client.get(deployment_path(self._id))
        since = _parse_time(current.get("status_changed_at"))
        self._deployment = self._moved("deployment", self._deployment, current["status"], since, None, "")
        for route in self._client.paged(deployment_path(self._id) + "/routes", limit=500):
            rid = str(route["id"])
            known = self._routes.get(rid)
            changed = _parse_time(route.get("status_changed_at"))
            self._routes[rid] = self._moved(f"route {rid[:8]}", known, route["status"], changed, None, "")
        summary = describe(current)
        if summary != self._summary:
            self._echo(None, summary)
            self._summary = summary
        return current

    def _moved(
        self, what: str, known: _Known | None, status: str, since: dt.datetime | None, at: Any, note: str
    ) -> _Known:
        """Print `what`'s move to `status` unless it is already known; the new knowledge."""
        if known is not None and known.status == status:
            return known
        if known is not None and since is not None and known.since is not None and since < known.since:
            return known  # older than what the API already said
        if known is not None or what != "deployment":  # the summary line shows where it started
            src = known.status if known is not None else "new"
            self._echo(at if at is not None else since, f"{what}  {src} -> {status}{note}")
        return _Known(status, since)

    def _on_event(self, message: SseMessage) -> bool:
        """Apply a deployment.status or route.status event; True when it moved something (the
        deployment may be done: re-read it)."""
        if message.event not in ("deployment.status", "route.status"):
            return False
        try:
            data = message.json()
        except ValueError:
            return False
        if not isinstance(data, dict) or not isinstance(data.get("to"), str):
            return False
        at = _parse_time(data.get("at"))
        detail = data["detail"] if isinstance(data.get("detail"), dict) else {}
        note = f"  ({detail['handler']})" if detail.get("handler") else ""
        if message.event == "route.status":
            rid = str(data.get("route_id") or "")
            if not rid:
                return False
            before = self._routes.get(rid)
            self._routes[rid] = self._moved(f"route {rid[:8]}", before, data["to"], at, data.get("at"), note)
            return self._routes[rid] is not before
        before = self._deployment
        self._deployment = self._moved("deployment", before, data["to"], at, data.get("at"), note)
        return self._deployment is not before
