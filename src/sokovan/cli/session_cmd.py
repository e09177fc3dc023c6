"""`sokovan session create/info/list/terminate/attempts/logs/history`: a client of REST v2."""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from sokovan.cli.client import (
    ApiClient,
    ApiError,
    ApiUnreachable,
    EventStream,
    SseMessage,
    StreamEnded,
    StreamUnavailable,
)
from sokovan.cli.common import load_or_exit

F = TypeVar("F", bound=Callable[..., Any])

POLL_INTERVAL = 0.2  # without an event stream: how often --wait polls the session
RESYNC_INTERVAL = 2.0  # with one: how often the session is re-read all the same
MAX_REOPENS = 5  # event streams that broke and were reopened before falling back to polling
OVERLAP_SKEW = dt.timedelta(seconds=2)  # clock skew allowed between the server and the history
DEDUP_WINDOW = 10.0  # seconds: a history row and an event this close are one transition
CATCH_UP_TRIES = 10  # reads of the session after the event that ended the wait
TERMINAL = frozenset({"TERMINATED", "ERROR", "CANCELLED"})


def api_options(func: F) -> F:
    func = click.option("--token", default=None, help="Bearer token (default: SOKOVAN_TOKEN).")(func)
    func = click.option("--api", "api_url", default=None, help="API base URL (default: SOKOVAN_API).")(func)
    return click.option(
        "--config", "config", type=click.Path(dir_okay=False), default=None, help="TOML config file."
    )(func)


def _client(api_url: str | None, token: str | None, config: str | None) -> ApiClient:
    settings = load_or_exit(config)
    token = token or settings.token
    if not token:
        raise click.ClickException("no token: set SOKOVAN_TOKEN or pass --token")
    return ApiClient(api_url or settings.api, token)


@contextmanager
def _api_errors() -> Iterator[None]:
    try:
        yield
    except ApiError as exc:
        raise click.ClickException(f"{exc.title}: {exc.detail}") from None
    except ApiUnreachable as exc:
        raise click.ClickException(str(exc)) from None


def _sid(session_id: str) -> str:
    return "/v2/sessions/" + urllib.parse.quote(session_id, safe="")


def _dump(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=False))


def _pairs(values: tuple[str, ...], what: str) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=what)
        out[key] = value
    return out


def _resources(text: str) -> dict[str, str]:
    return _pairs(tuple(p.strip() for p in text.split(",") if p.strip()), "--resources")


@click.group()
def session() -> None:
    """Create, follow and terminate sessions (REST v2 client)."""


@session.command()
@click.option("--image", required=True, help="An image some agent offers (e.g. python:3, shell).")
@click.option(
    "--type", "session_type", type=click.Choice(["batch", "interactive", "inference"]), default=None
)
@click.option("--command", default=None, help="Run under /bin/sh -c (required for batch).")
@click.option("--resources", default=None, help="Per kernel, e.g. cpu=1,mem=256m.")
@click.option("--cluster-size", type=int, default=None)
@click.option("--cluster-mode", type=click.Choice(["single-node", "multi-node"]), default=None)
@click.option("--scaling-group", default=None)
@click.option("--env", "env", multiple=True, help="KEY=VALUE, repeatable.")
@click.option("--name", default=None)
@click.option("--priority", type=int, default=None)
@click.option("--depends-on", "depends_on", multiple=True, help="Session id, repeatable.")
@click.option("--creation-id", default=None, help="Idempotency key: a repeat returns the same session.")
@click.option("--max-retries", type=int, default=None, help="Shorthand for retry_policy.max_retries.")
@click.option("--wait", is_flag=True, help="Follow the session to RUNNING or a terminal status.")
@click.option(
    "--dry-run",
    "dry_run",
    is_flag=True,
    help="Validate and show where it would be placed now; create nothing.",
)
@click.option("--json", "as_json", is_flag=True)
@api_options
def create(
    image: str,
    session_type: str | None,
    command: str | None,
    resources: str | None,
    cluster_size: int | None,
    cluster_mode: str | None,
    scaling_group: str | None,
    env: tuple[str, ...],
    name: str | None,
    priority: int | None,
    depends_on: tuple[str, ...],
    creation_id: str | None,
    max_retries: int | None,
    wait: bool,
    dry_run: bool,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """Create a session (or, with --dry-run, only say where it would go)."""
    if dry_run and wait:
        raise click.UsageError("--dry-run and --wait cannot be combined")
    body: dict[str, Any] = {"image": image}
    optional: dict[str, Any] = {
        "type": session_type,
        "command": command,
        "resources": _resources(resources) if resources else None,
        "cluster_size": cluster_size,
        "cluster_mode": cluster_mode,
        "scaling_group": scaling_group,
        "environ": _pairs(env, "--env") or None,
        "name": name,
        "priority": priority,
        "depends_on": list(depends_on) or None,
        "creation_id": creation_id,
        "retry_policy": {"max_retries": max_retries} if max_retries is not None else None,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    client = _client(api_url, token, config)
    if dry_run:
        with _api_errors():
            _, answer = client.request("POST", "/v2/sessions", body=body, query={"dry_run": True})
        _print_dry_run(answer, as_json)
        return
    with _api_errors():
        status, created = client.request("POST", "/v2/sessions", body=body)
        verb = "created" if status == 201 else "already exists (same creation id)"
        if not wait:
            if as_json:
                _dump(created)
            else:
                click.echo(f"session {created['id']} ({created['name']}) {verb}: {created['status']}")
            return
        click.echo(f"session {created['id']} ({created['name']}) {verb}", err=as_json)
        final = _follow(client, created["id"], err=as_json)
    if as_json:
        _dump(final)
    sys.exit(_exit_code(final))


@session.command()
@click.argument("session_id")
@click.option("--to-end", "to_end", is_flag=True, help="Keep following a RUNNING session until it ends.")
@click.option("--json", "as_json", is_flag=True, help="Print the final session as JSON (the rest to stderr).")
@api_options
def watch(
    session_id: str, to_end: bool, as_json: bool, api_url: str | None, token: str | None, config: str | None
) -> None:
    """Follow a session's transitions as they happen, until RUNNING or a terminal status.

    Exits 0 when it is RUNNING or ended with result SUCCESS (or none), 1 otherwise."""
    client = _client(api_url, token, config)
    with _api_errors():
        current = client.get(_sid(session_id))
        click.echo(f"session {current['id']} ({current['name']}): {current['status']}", err=as_json)
        final = _follow(client, current["id"], err=as_json, until_end=to_end)
    if as_json:
        _dump(final)
    sys.exit(_exit_code(final))


def _print_dry_run(answer: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _dump(answer)
    elif answer["placeable"]:
        click.echo(f"placeable now: {', '.join(answer['agents'])} (dry run: nothing was created)")
    else:
        click.echo(f"not placeable now: {answer['pending_reason']} (dry run: nothing was created)")


def _follow(client: ApiClient, session_id: str, *, err: bool, until_end: bool = False) -> dict[str, Any]:
    """Follow until RUNNING (unless `until_end`) or terminal, printing every transition.

    The event stream is opened first, then the transitions already in the scheduling history are
    printed, then those the stream brings as they happen, so none is missed or printed twice.
    The session is also re-read every `RESYNC_INTERVAL` seconds (a pending reason that changed,
    an event the live stream lost); without a stream (an older server, a proxy) it is polled
    every `POLL_INTERVAL` seconds instead, as before.
    """
    follower = _Follower(client, session_id, err=err, until_end=until_end)
    try:
        return follower.run()
    except KeyboardInterrupt:
        click.echo("stopped following; the session goes on", err=True)
        sys.exit(130)
    finally:
        follower.close()


Transition = tuple[str, str]


class _Follower:
    def __init__(self, client: ApiClient, session_id: str, *, err: bool, until_end: bool) -> None:
        self._client = client
        self._sid = session_id
        self._err = err
        self._until_end = until_end
        self._stream: EventStream | None = None
        self._reopens = 0
        # History rows at or after this may come on the stream as well (None: no stream yet).
        self._overlap_since: dt.datetime | None = None
        self._rows_seen = 0
        self._last_reason: str | None = None
        # Printed from one source, maybe still to come from the other: (transition, time).
        self._from_history: list[tuple[Transition, dt.datetime | None]] = []
        self._from_stream: list[tuple[Transition, dt.datetime | None]] = []

    def _done(self, status: str | None) -> bool:
        return status in TERMINAL or (status == "RUNNING" and not self._until_end)

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
                    self._stream.close()
                    self._stream = None
                    if self._reopens < MAX_REOPENS:
                        self._reopens += 1
                        self._open()
                    break  # re-read at once: something may have happened while it was down
                if message is None:
                    break
                status = self._on_event(message)
                if self._done(status):
                    return self._finish_after_event(str(status))
            if self._stream is None:
                time.sleep(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _open(self) -> None:
        try:
            self._stream = self._client.events(session_id=self._sid)
        except StreamUnavailable:
            self._stream = None
            return
        # Rows written a little before the server answered may still be on their way as events.
        since = self._stream.opened_at - OVERLAP_SKEW
        self._overlap_since = since if self._overlap_since is None else min(self._overlap_since, since)

    def _resync(self) -> dict[str, Any]:
        current: dict[str, Any] = self._client.get(_sid(self._sid))
        rows = self._client.paged(_sid(self._sid) + "/history", limit=500)
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
        """Print a session.status event; the status it reached (None for other events)."""
        if message.event != "session.status":
            return None
        try:
            data = message.json()
        except ValueError:
            return None
        if not isinstance(data, dict):
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
            current = self._client.get(_sid(self._sid))
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
        parts = [status, f"result={s.get('result')}"]
        if info.get("cause"):
            parts.append(f"cause={info['cause']}")
        if info.get("message"):
            parts.append(f"({info['message']})")
        return "  ".join(parts)
    return str(status)


def _exit_code(s: dict[str, Any]) -> int:
    if s["status"] == "RUNNING":
        return 0
    if s["status"] == "TERMINATED" and s.get("result") in (None, "SUCCESS"):
        return 0
    return 1


@session.command()
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True)
@api_options
def info(session_id: str, as_json: bool, api_url: str | None, token: str | None, config: str | None) -> None:
    """Show one session."""
    client = _client(api_url, token, config)
    with _api_errors():
        s = client.get(_sid(session_id))
    if as_json:
        _dump(s)
        return
    info_ = s.get("status_info") or {}
    rows = [
        ("id", s["id"]),
        ("name", s["name"]),
        ("owner", f"{s['owner']} ({s['access_key']})"),
        ("status", s["status"] + (f"  result={s['result']}" if s.get("result") else "")),
        ("cause", f"{info_.get('cause')}: {info_.get('message', '')}" if info_.get("cause") else None),
        ("pending reason", info_.get("pending_reason")),
        ("type", s["type"]),
        ("image", s["image"]),
        ("command", s.get("command")),
        ("resources", ", ".join(f"{k}={v}" for k, v in s["resources"].items()) + " per kernel"),
        ("cluster", f"{s['cluster_size']} kernel(s), {s['cluster_mode']}"),
        ("scaling group", s["scaling_group"]),
        ("priority", s["priority"]),
        ("depends on", ", ".join(s.get("depends_on") or []) or None),
        ("created", s["created_at"]),
        ("status changed", s["status_changed_at"]),
        ("terminated", s.get("terminated_at")),
        (
            "retry",
            s["retry_state"] + (f", retry of {s['parent_session_id']}" if s.get("parent_session_id") else ""),
        ),
        ("retry cause", s.get("retry_cause")),
        ("retry decision", _retry_decision(info_.get("retry"))),
        ("next attempt", s.get("retry_child_id")),
        ("retry chain", _chain(s)),
    ]
    for label, value in rows:
        if value not in (None, ""):
            click.echo(f"{label + ':':<16}{value}")
    click.echo("kernels:")
    for k in s.get("kernels", []):
        exit_code = "" if k.get("exit_code") is None else f"  exit={k['exit_code']}"
        agent = k.get("agent_id") or "-"
        click.echo(f"  {k['id']}  {k['cluster_role']:<4}  {k['status']:<11}  agent={agent}{exit_code}")


def _retry_decision(decision: Any) -> str | None:
    """What the retry engine decided when this attempt failed (status_info.retry)."""
    if not isinstance(decision, dict) or not decision.get("decision"):
        return None
    what = str(decision["decision"])
    if what == "scheduled" and decision.get("due_at"):
        return f"scheduled, due at {decision['due_at']}"
    if decision.get("reason"):
        return f"{what}: {decision['reason']}"
    return what


def _chain(s: dict[str, Any]) -> str | None:
    """The retry chain, oldest first, this session in [brackets]; None outside a chain."""
    chain = s.get("retry_chain") or []
    if len(chain) < 2:
        return None
    return " -> ".join(f"[{i}]" if i == s["id"] else i for i in chain)


@session.command()
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True)
@api_options
def attempts(
    session_id: str, as_json: bool, api_url: str | None, token: str | None, config: str | None
) -> None:
    """Show every attempt of the session's retry chain, oldest first."""
    client = _client(api_url, token, config)
    with _api_errors():
        items = client.paged(_sid(session_id) + "/attempts")
    if as_json:
        _dump({"items": items, "next_cursor": None})
        return
    click.echo(f"{'#':<3}  {'ID':<36}  {'STATUS':<11}  {'RESULT':<8}  {'CAUSE':<19}  {'CREATED':<27}  ENDED")
    for a in items:
        click.echo(
            f"{a['retry_count'] + 1:<3}  {a['id']:<36}  {a['status']:<11}  {a.get('result') or '-':<8}  "
            f"{a.get('cause') or '-':<19}  {a['created_at']:<27}  {a.get('terminated_at') or '-'}"
        )


@session.command(name="list")
@click.option("--status", default=None, help="Comma-separated statuses.")
@click.option("--type", "session_type", default=None)
@click.option("--owner", default=None, help="User name (admins only).")
@click.option("--limit", type=int, default=50, show_default=True)
@click.option("--cursor", default=None, help="next_cursor of a previous page.")
@click.option("--json", "as_json", is_flag=True)
@api_options
def list_(
    status: str | None,
    session_type: str | None,
    owner: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """List sessions, newest first."""
    client = _client(api_url, token, config)
    with _api_errors():
        page = client.get(
            "/v2/sessions", status=status, type=session_type, owner=owner, limit=limit, cursor=cursor
        )
    if as_json:
        _dump(page)
        return
    click.echo(f"{'ID':<36}  {'NAME':<20}  {'STATUS':<11}  {'TYPE':<11}  {'OWNER':<12}  CREATED")
    for s in page["items"]:
        click.echo(
            f"{s['id']:<36}  {s['name'][:20]:<20}  {s['status']:<11}  {s['type']:<11}  "
            f"{s['owner'][:12]:<12}  {s['created_at']}"
        )
    if page.get("next_cursor"):
        click.echo(f"(more: --cursor {page['next_cursor']})")


@session.command()
@click.argument("session_id")
@click.option("--forced", is_flag=True, help="Skip the graceful stop.")
@click.option("--json", "as_json", is_flag=True)
@api_options
def terminate(
    session_id: str, forced: bool, as_json: bool, api_url: str | None, token: str | None, config: str | None
) -> None:
    """Terminate a session (PENDING ones are cancelled)."""
    client = _client(api_url, token, config)
    with _api_errors():
        _, s = client.request("DELETE", _sid(session_id), query={"forced": forced})
    if as_json:
        _dump(s)
    else:
        click.echo(f"session {s['id']}: {s['status']}")


@session.command()
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True)
@api_options
def logs(session_id: str, as_json: bool, api_url: str | None, token: str | None, config: str | None) -> None:
    """Print the stdout/stderr tail of each kernel."""
    client = _client(api_url, token, config)
    with _api_errors():
        body = client.get(_sid(session_id) + "/logs")
    if as_json:
        _dump(body)
        return
    if not body["items"]:
        click.echo("(no kernel has been placed on an agent yet)")
    for item in body["items"]:
        if item.get("error"):
            click.echo(f"==> kernel {item['kernel_id']}: logs unavailable: {item['error']}", err=True)
            continue
        for stream in ("stdout", "stderr"):
            if item[stream]:
                click.echo(f"==> kernel {item['kernel_id']} {stream} <==")
                click.echo(item[stream], nl=not item[stream].endswith("\n"))


@session.command()
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True)
@api_options
def history(
    session_id: str, as_json: bool, api_url: str | None, token: str | None, config: str | None
) -> None:
    """Show the scheduling history, oldest first."""
    client = _client(api_url, token, config)
    with _api_errors():
        items = client.paged(_sid(session_id) + "/history", limit=500)
    if as_json:
        _dump({"items": items, "next_cursor": None})
        return
    click.echo(f"{'TIME':<27}  {'HANDLER':<24}  {'RESULT':<10}  {'FROM -> TO':<26}  TRY  MESSAGE")
    for h in items:
        move = f"{h.get('from_status') or '-'} -> {h.get('to_status') or '-'}"
        click.echo(
            f"{h['created_at']:<27}  {h['handler'][:24]:<24}  {h['result']:<10}  {move:<26}  "
            f"{h['attempt']:<3}  {h.get('message') or ''}"
        )
