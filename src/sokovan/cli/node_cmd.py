"""`sokovan node list/status/drain/undrain/disable/enable`: the node lifecycle's operator commands
(seed 002), a client of REST v2's `/v2/agents`.

The actions are admin-only. An action the node's current status does not allow is answered 409
and printed as one line (`Error: Conflict: agent a-1 is DRAINED; drain needs READY or DEGRADED`),
exit code 1. An urgent drain and a disable end work on the node, so at a terminal they ask first
(`--yes` skips the question); run from a script, they do not ask.
"""

from __future__ import annotations

import datetime as dt
import sys
import urllib.parse
from typing import Any

import click

from sokovan.cli.client import ApiClient, ApiError
from sokovan.cli.session_cmd import _api_errors, _client, _dump, api_options
from sokovan.cli.units import BYTES_OPTION, size_text, slots_text

HISTORY_SHOWN = 10


def agent_path(agent_id: str) -> str:
    return f"/v2/agents/{urllib.parse.quote(agent_id, safe='')}"


@click.group()
def node() -> None:
    """Node lifecycle: list, inspect, drain, undrain, disable and enable agents (admin)."""


def _age(stamp: str | None, now: dt.datetime | None = None) -> str:
    """An ISO time as its two largest units of age ("3m12s ago", "2d4h ago"); "-" for none."""
    if not stamp:
        return "-"
    seconds = max(
        0, int(((now or dt.datetime.now(dt.UTC)) - dt.datetime.fromisoformat(stamp)).total_seconds())
    )
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count or (unit == "s" and not parts):
            parts.append(f"{count}{unit}")
    return "".join(parts[:2]) + " ago"


def _reason(info: dict[str, Any]) -> str | None:
    if not info.get("reason"):
        return None
    by = f" by {info['by']}" if info.get("by") else ""
    via = f" ({info['handler']}{by})" if info.get("handler") else by
    return f"{info['reason']}{via}"


def _health(health: dict[str, Any] | None, raw: bool) -> str:
    """The last heartbeat's health summary in words: `ok, 12.5 GiB free for kernels, load 0.42`
    (`problems: ...` in place of `ok` when it is not); "-" before the first one."""
    if not health:
        return "-"
    problems = [str(p) for p in health.get("problems") or []]
    parts: list[str] = []
    if problems or health.get("ok") is False:
        parts.append("problems: " + ("; ".join(problems) or "unnamed"))
    elif health.get("ok") is True:
        parts.append("ok")
    free = health.get("work_dir_free")
    if free is not None:
        parts.append(f"{free} bytes free for kernels" if raw else f"{size_text(free)} free for kernels")
    load = health.get("load1")
    if isinstance(load, int | float) and not isinstance(load, bool):
        parts.append(f"load {load:.2f}")
    known = {"ok", "problems", "work_dir_free", "load1"}
    parts += [f"{k}={v}" for k, v in health.items() if k not in known and v not in (None, "", [], {})]
    return ", ".join(parts) or "-"


@node.command(name="list")
@click.option("--status", default=None, help="Comma-separated statuses, e.g. DEGRADED,DOWN.")
@click.option("--scaling-group", default=None)
@click.option("--json", "as_json", is_flag=True)
@api_options
def list_(
    status: str | None,
    scaling_group: str | None,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """List nodes by id."""
    client = _client(api_url, token, config)
    with _api_errors():
        items = client.paged("/v2/agents", status=status, scaling_group=scaling_group, limit=500)
    if as_json:
        _dump({"items": items, "next_cursor": None})
        return
    click.echo(
        f"{'ID':<24}  {'STATUS':<9}  {'CLASS':<9}  {'GROUP':<12}  {'KERNELS':>7}  {'SCHED':<5}  "
        f"{'SINCE':<12}  LAST HEARTBEAT"
    )
    for a in items:
        sched = "yes" if a["schedulable"] else "no"
        click.echo(
            f"{a['id'][:24]:<24}  {a['status']:<9}  {a['agent_class']:<9}  {a['scaling_group'][:12]:<12}  "
            f"{a['running_kernels']:>7}  {sched:<5}  {_age(a['status_changed_at']):<12}  "
            f"{_age(a.get('last_heartbeat_at'))}"
        )


def _history(client: ApiClient, agent_id: str, limit: int) -> list[Any] | None:
    """The node's most recent status changes; None when the caller may not read them."""
    try:
        page = client.get(agent_path(agent_id) + "/history", limit=limit)
    except ApiError as exc:
        if exc.status == 403:
            return None
        raise
    items: list[Any] = page["items"]
    return items


@node.command()
@click.argument("agent_id", metavar="ID")
@click.option("--history", "shown", type=click.IntRange(1, 500), default=HISTORY_SHOWN, show_default=True)
@BYTES_OPTION
@click.option("--json", "as_json", is_flag=True)
@api_options
def status(
    agent_id: str,
    shown: int,
    raw_bytes: bool,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """Show a node: state and since when, class, kernels, slots (memory in binary units; --bytes
    or --json for bytes), last heartbeat, health, why, history."""
    client = _client(api_url, token, config)
    with _api_errors():
        a = client.get(agent_path(agent_id))
        history = _history(client, agent_id, shown)
    if as_json:
        _dump({**a, "history": history})
        return
    held = "  (disabled: DOWN until enabled)" if a.get("disabled") else ""
    used, total = a["occupied_slots"], a["available_slots"]
    slots = f"{slots_text(used, raw=raw_bytes)} of {slots_text(total, raw=raw_bytes)}"
    beat = a.get("last_heartbeat_at")
    rows = [
        ("id", a["id"]),
        ("state", f"{a['status']}{held}"),
        ("since", f"{a['status_changed_at']} ({_age(a['status_changed_at'])})"),
        ("reason", _reason(a.get("status_info") or {})),
        ("class", a["agent_class"]),
        ("scaling group", a["scaling_group"]),
        ("schedulable", "yes" if a["schedulable"] else "no"),
        ("kernels", a["running_kernels"]),
        ("slots", slots),
        ("last heartbeat", f"{beat} ({_age(beat)}), seq {a['heartbeat_seq']}" if beat else "never"),
        ("boot id", a.get("boot_id")),
        ("rejected beats", a.get("rejected_beats") or None),
        ("health", _health(a.get("health"), raw_bytes)),
    ]
    for label, value in rows:
        if value not in (None, ""):
            click.echo(f"{label + ':':<16}{value}")
    if history is None:
        click.echo("history:        (admins only)")
        return
    click.echo("recent history:" if history else "recent history: (none)")
    for h in history:
        move = f"{h.get('from') or '-'} -> {h.get('to') or '-'}"
        by = f"  by {h['actor']}" if h.get("actor") else ""
        click.echo(f"  {h['at']}  {move:<22}  {h['handler']}{by}: {h.get('reason') or ''}")


def _act(
    action: str,
    agent_id: str,
    body: dict[str, Any],
    as_json: bool,
    client: ApiClient,
    after: str = "",
) -> None:
    with _api_errors():
        _, a = client.request("POST", agent_path(agent_id) + f"/{action}", body=body)
    if as_json:
        _dump(a)
        return
    click.echo(f"agent {a['id']}: {a['status']}{after}")


def _confirm(question: str, yes: bool) -> None:
    """Ask at a terminal unless `--yes`; a script (no terminal) is not asked."""
    if not yes and sys.stdin.isatty():
        click.confirm(question, abort=True)


def _body(reason: str | None, **extra: Any) -> dict[str, Any]:
    return {**({"reason": reason} if reason is not None else {}), **extra}


REASON = click.option("--reason", default=None, help="Why (kept in the audit log and the node's history).")
YES = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
AS_JSON = click.option("--json", "as_json", is_flag=True, help="Print the node as JSON.")


@node.command()
@click.argument("agent_id", metavar="ID")
@click.option("--urgent", is_flag=True, help="Also terminate its sessions now (retried elsewhere).")
@REASON
@YES
@AS_JSON
@api_options
def drain(
    agent_id: str,
    urgent: bool,
    reason: str | None,
    yes: bool,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """Stop placing work on a node (READY or DEGRADED -> DRAINING, DRAINED once it is empty)."""
    client = _client(api_url, token, config)
    if urgent:
        _confirm(f"Terminate every session running on {agent_id} now?", yes)
    after = "; its sessions are being terminated (NODE_DRAINED)" if urgent else ""
    _act("drain", agent_id, _body(reason, urgent=urgent), as_json, client, after)


@node.command()
@click.argument("agent_id", metavar="ID")
@REASON
@AS_JSON
@api_options
def undrain(
    agent_id: str,
    reason: str | None,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """Take a node back into scheduling (DRAINING or DRAINED -> READY)."""
    _act("undrain", agent_id, _body(reason), as_json, _client(api_url, token, config))


@node.command()
@click.argument("agent_id", metavar="ID")
@REASON
@YES
@AS_JSON
@api_options
def disable(
    agent_id: str,
    reason: str | None,
    yes: bool,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """Take a node out at once (-> DOWN; its kernels end and their sessions are retried elsewhere)."""
    client = _client(api_url, token, config)
    _confirm(f"Take {agent_id} DOWN now, ending every kernel on it?", yes)
    _act("disable", agent_id, _body(reason), as_json, client, " (disabled)")


@node.command()
@click.argument("agent_id", metavar="ID")
@REASON
@AS_JSON
@api_options
def enable(
    agent_id: str,
    reason: str | None,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """Let a DOWN or FAILED node boot again (-> BOOTING, READY at its next healthy heartbeat)."""
    _act("enable", agent_id, _body(reason), as_json, _client(api_url, token, config))
