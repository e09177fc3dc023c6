"""`sokovan session create/info/list/terminate/attempts/logs/history`: a client of REST v2."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from sokovan.cli.client import (
    ApiClient,
    ApiError,
    ApiUnreachable,
)
from sokovan.cli.common import load_or_exit
from sokovan.cli.history_view import clean_message, shown_rows
from sokovan.cli.preemption_view import dry_run_victims
from sokovan.cli.session_follow import exit_code, follow, session_path
from sokovan.cli.session_view import print_session
from sokovan.cli.units import BYTES_OPTION, span_seconds
from sokovan.common.types import SessionStatus

F = TypeVar("F", bound=Callable[..., Any])


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
@click.option("--priority", type=int, default=None, help="0-100, higher first (above 10: admins only).")
@click.option(
    "--preemptible/--not-preemptible",
    default=None,
    help="May higher-priority work evict it (default: yes for batch, no otherwise).",
)
@click.option(
    "--max-duration",
    default=None,
    help="The longest it may run (seconds, or 90s/30m/2h/1d); past it, it ends (LIFETIME_EXCEEDED).",
)
@click.option("--depends-on", "depends_on", multiple=True, help="Session id, repeatable.")
@click.option("--creation-id", default=None, help="Idempotency key: a repeat returns the same session.")
@click.option("--max-retries", type=int, default=None, help="Shorthand for retry_policy.max_retries.")
@click.option("--wait", is_flag=True, help="Follow it to RUNNING (batch: to its end) or a terminal status.")
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
    preemptible: bool | None,
    max_duration: str | None,
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
        "preemptible": preemptible,
        "max_duration": span_seconds(max_duration, "--max-duration") if max_duration else None,
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
        stop_at = None if created.get("type") == "batch" else "RUNNING"
        final = follow(client, created["id"], err=as_json, stop_at=stop_at)
    if as_json:
        _dump(final)
    sys.exit(exit_code(final))


@session.command()
@click.argument("session_id")
@click.option(
    "--until",
    "until",
    type=click.Choice([s.value for s in SessionStatus], case_sensitive=False),
    default=None,
    help="Stop once it reaches STATUS (or a later one on the way to RUNNING), e.g. RUNNING. "
    "Default: follow it to its end.",
)
@click.option("--to-end", "to_end", is_flag=True, hidden=True, help="The default; kept for old scripts.")
@click.option("--json", "as_json", is_flag=True, help="Print the final session as JSON (the rest to stderr).")
@api_options
def watch(
    session_id: str,
    until: str | None,
    to_end: bool,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """Follow a session's transitions as they happen, until it ends (TERMINATED, ERROR or
    CANCELLED) or, with --until, reaches that status.

    Exits 0 when it stopped where --until said or ended TERMINATED with result SUCCESS (or none),
    1 otherwise."""
    client = _client(api_url, token, config)
    stop_at = None if to_end or until is None else until.upper()
    with _api_errors():
        current = client.get(session_path(session_id))
        click.echo(f"session {current['id']} ({current['name']}): {current['status']}", err=as_json)
        final = follow(client, current["id"], err=as_json, stop_at=stop_at)
    if as_json:
        _dump(final)
    sys.exit(exit_code(final))


def _print_dry_run(answer: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _dump(answer)
    elif answer["placeable"]:
        victims = dry_run_victims(answer)
        where = ", ".join(answer["agents"]) + (f" {victims}" if victims else "")
        click.echo(f"placeable now: {where} (dry run: nothing was created)")
    else:
        reason = answer.get("pending_reason") or "no reason given"
        click.echo(f"not placeable now: {reason} (dry run: nothing was created)")


@session.command()
@click.argument("session_id")
@BYTES_OPTION
@click.option("--json", "as_json", is_flag=True)
@api_options
def info(
    session_id: str,
    raw_bytes: bool,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """Show one session (memory in binary units; --bytes or --json for bytes)."""
    client = _client(api_url, token, config)
    with _api_errors():
        s = client.get(session_path(session_id))
    if as_json:
        _dump(s)
        return
    print_session(s, raw_bytes)


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
        items = client.paged(session_path(session_id) + "/attempts")
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
        _, s = client.request("DELETE", session_path(session_id), query={"forced": forced})
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
        body = client.get(session_path(session_id) + "/logs")
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
@click.option(
    "--all", "show_all", is_flag=True, help="Also the handler runs that moved nothing (FROM equal to TO)."
)
@click.option("--json", "as_json", is_flag=True)
@api_options
def history(
    session_id: str, show_all: bool, as_json: bool, api_url: str | None, token: str | None, config: str | None
) -> None:
    """Show the scheduling history, oldest first: every handler run that moved the session (with
    --all, also those that left it where it was)."""
    client = _client(api_url, token, config)
    with _api_errors():  # every row (`all`), so that what is left out here can be counted
        fetched = client.paged(session_path(session_id) + "/history", limit=500, all=True)
    items, hidden = shown_rows(fetched, show_all=show_all)
    if as_json:
        _dump({"items": items, "next_cursor": None})
        return
    click.echo(f"{'TIME':<27}  {'HANDLER':<24}  {'RESULT':<10}  {'FROM -> TO':<26}  TRY  MESSAGE")
    for h in items:
        move = f"{h.get('from_status') or '-'} -> {h.get('to_status') or '-'}"
        click.echo(
            f"{h['created_at']:<27}  {h['handler'][:24]:<24}  {h['result']:<10}  {move:<26}  "
            f"{h['attempt']:<3}  {clean_message(h.get('message'))}".rstrip()
        )
    if hidden:
        runs = "run" if hidden == 1 else "runs"
        click.echo(f"({hidden} handler {runs} that moved nothing not shown; --all shows them)")
