"""`sokovan scaling-group list/info/create/update`: scaling groups through REST v2 (writes: admins).

`update` sends only what its options name (a PATCH); `--preemption-mode` and `--preemption-grace`
given alone change only that key of the group's `preemption`, the other is kept."""

from __future__ import annotations

import math
import urllib.parse
from typing import Any

import click

from sokovan.cli.session_cmd import _api_errors, _client, _dump, api_options

MODES = ["off", "terminate", "requeue"]


def group_path(name: str) -> str:
    return "/v2/scaling-groups/" + urllib.parse.quote(name, safe="")


def _finite(_ctx: click.Context, _param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise click.BadParameter("must be a finite number of seconds")
    return value


def _csv(value: str | None) -> list[str] | None:
    return [p.strip() for p in value.split(",") if p.strip()] if value is not None else None


def _preemption_text(p: dict[str, Any] | None) -> str:
    if not p:
        return "-"
    mode, grace = p.get("mode") or "-", p.get("grace_period")
    if grace is None:
        return str(mode)
    grace_text = f"{grace:g}" if isinstance(grace, int | float) else str(grace)
    return f"{mode}, grace {grace_text}s"


def _show(g: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _dump(g)
        return
    rows = [
        ("name", g["name"]),
        ("scheduler", g["scheduler"]),
        ("agent selection", g["agent_selection"]),
        ("pending timeout", f"{g['pending_timeout']:g}s" if g["pending_timeout"] else "none"),
        ("session types", ", ".join(g["allowed_session_types"])),
        ("queue policy", g["queue_policy"]),
        ("resource order", ", ".join(g["resource_priority"])),
        ("preemption", _preemption_text(g.get("preemption"))),
        ("created", g["created_at"]),
    ]
    for label, value in rows:
        click.echo(f"{label + ':':<17}{value}")


def group_options(func: Any) -> Any:
    """The settable fields, every one optional (left out: the server's default or the stored value)."""
    options = [
        click.option("--scheduler", default=None, help="A sequencer: fifo, lifo, drf, fair_share."),
        click.option(
            "--agent-selection", default=None, help="A selector: concentrated, dispersed, roundrobin."
        ),
        click.option(
            "--pending-timeout", type=float, default=None, callback=_finite, help="Seconds; 0 = none."
        ),
        click.option("--session-types", default=None, help="Comma-separated: batch,interactive,inference."),
        click.option("--queue-policy", type=click.Choice(["backfill", "block", "reserve"]), default=None),
        click.option("--resource-priority", default=None, help="Comma-separated slot names, e.g. cpu,mem."),
        click.option(
            "--preemption-mode",
            type=click.Choice(MODES),
            default=None,
            help="What a session that finds no room may do to lower-priority preemptible ones.",
        ),
        click.option(
            "--preemption-grace",
            type=float,
            default=None,
            callback=_finite,
            help="Seconds between a victim's SIGTERM and SIGKILL (0-3600).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _body(values: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "scheduler": values["scheduler"],
        "agent_selection": values["agent_selection"],
        "pending_timeout": values["pending_timeout"],
        "allowed_session_types": _csv(values["session_types"]),
        "queue_policy": values["queue_policy"],
        "resource_priority": _csv(values["resource_priority"]),
    }
    preemption = {
        k: v
        for k, v in (("mode", values["preemption_mode"]), ("grace_period", values["preemption_grace"]))
        if v is not None
    }
    if preemption:
        body["preemption"] = preemption
    return {k: v for k, v in body.items() if v is not None}


@click.group(name="scaling-group")
def scaling_group() -> None:
    """Scaling groups: scheduling settings and preemption (REST v2 client; writes are for admins)."""


@scaling_group.command(name="list")
@click.option("--json", "as_json", is_flag=True)
@api_options
def list_(as_json: bool, api_url: str | None, token: str | None, config: str | None) -> None:
    """List scaling groups by name."""
    client = _client(api_url, token, config)
    with _api_errors():
        items = client.paged("/v2/scaling-groups", limit=500)
    if as_json:
        _dump({"items": items, "next_cursor": None})
        return
    click.echo(f"{'NAME':<20}  {'SCHEDULER':<9}  {'SELECTION':<13}  {'QUEUE':<8}  PREEMPTION")
    for g in items:
        click.echo(
            f"{g['name'][:20]:<20}  {g['scheduler']:<9}  {g['agent_selection'][:13]:<13}  "
            f"{g['queue_policy']:<8}  {_preemption_text(g.get('preemption'))}"
        )


@scaling_group.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@api_options
def info(name: str, as_json: bool, api_url: str | None, token: str | None, config: str | None) -> None:
    """Show one scaling group."""
    client = _client(api_url, token, config)
    with _api_errors():
        g = client.get(group_path(name))
    _show(g, as_json)


@scaling_group.command()
@click.argument("name")
@group_options
@click.option("--json", "as_json", is_flag=True)
@api_options
def create(
    name: str, as_json: bool, api_url: str | None, token: str | None, config: str | None, **values: Any
) -> None:
    """Create a scaling group (admins); options left out take the server's defaults."""
    client = _client(api_url, token, config)
    with _api_errors():
        _, g = client.request("POST", "/v2/scaling-groups", body={"name": name, **_body(values)})
    _show(g, as_json)


@scaling_group.command()
@click.argument("name")
@group_options
@click.option("--json", "as_json", is_flag=True)
@api_options
def update(
    name: str, as_json: bool, api_url: str | None, token: str | None, config: str | None, **values: Any
) -> None:
    """Change the fields the options name (admins); the others keep their value."""
    body = _body(values)
    if not body:
        raise click.UsageError("nothing to change: give at least one option")
    client = _client(api_url, token, config)
    with _api_errors():
        _, g = client.request("PATCH", group_path(name), body=body)
    _show(g, as_json)
