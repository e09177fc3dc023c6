"""`sokovan deployment create/info/list/scale/destroy/routes/history` (and, from
`deployment_update_cmd`, `update/rollback/token/autoscale`): a client of REST v2.

A deployment is named on the command line by its id or by its name (the live deployment of that
name). `create --wait` follows it until every replica is HEALTHY (`deployment_follow`). `create`
prints the deployment's access token once, unless `--public`.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

import click

from sokovan.cli.deployment_follow import FollowTimeout, deployment_path, describe, follow_deployment, resolve
from sokovan.cli.deployment_update_cmd import COMMANDS
from sokovan.cli.session_cmd import _api_errors, _client, _dump, _pairs, _resources, api_options
from sokovan.cli.units import BYTES_OPTION, slots_text

TYPES = ("custom", "vllm", "tgi", "sglang")
DEFAULT_TIMEOUT = 600.0
__all__ = ["deployment", "resolve"]


@click.group()
def deployment() -> None:
    """Create, update, scale and destroy deployments: N replicas of an HTTP service (REST v2 client)."""


for _command in COMMANDS:
    deployment.add_command(_command)


def _health_check(
    path: str | None,
    interval: float | None,
    timeout: float | None,
    healthy: int | None,
    unhealthy: int | None,
    delay: float | None,
) -> dict[str, Any] | None:
    given = {
        "path": path,
        "interval": interval,
        "timeout": timeout,
        "healthy_threshold": healthy,
        "unhealthy_threshold": unhealthy,
        "initial_delay": delay,
    }
    return {k: v for k, v in given.items() if v is not None} or None


@deployment.command()
@click.option("--name", required=True, help="1-40 of a-z, 0-9 and '-'; the proxy serves it at /<name>/.")
@click.option("--type", "kind", type=click.Choice(TYPES), default="custom", show_default=True)
@click.option("--replicas", type=int, default=None, help="Target number of replicas (default 1).")
@click.option("--image", default=None, help="custom: required; model types: defaults to the type's image.")
@click.option("--command", default=None, help="custom: the server's command line; it listens on $PORT.")
@click.option("--model", default=None, help="vllm, tgi, sglang: the model to serve.")
@click.option("--resources", default=None, help="Per replica, e.g. cpu=1,mem=256m.")
@click.option("--env", "env", multiple=True, help="KEY=VALUE, repeatable.")
@click.option("--scaling-group", default=None)
@click.option("--health-path", default=None, help="Probed on every replica (default /health).")
@click.option("--health-interval", type=float, default=None, help="Seconds between probes (default 5).")
@click.option("--health-timeout", type=float, default=None, help="Seconds a probe may take (default 2).")
@click.option("--healthy-threshold", type=int, default=None, help="Passing probes to be HEALTHY (default 2).")
@click.option(
    "--unhealthy-threshold", type=int, default=None, help="Failing probes to be UNHEALTHY (default 3)."
)
@click.option("--initial-delay", type=float, default=None, help="Seconds before the first probe (default 0).")
@click.option("--public", is_flag=True, help="Open to anyone through the proxy: no access token.")
@click.option("--dry-run", "dry_run", is_flag=True, help="Validate and show the generated definition only.")
@click.option("--wait", is_flag=True, help="Follow it until READY with every replica HEALTHY.")
@click.option(
    "--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True, help="Seconds --wait waits."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with --wait: the final deployment).")
@api_options
def create(
    name: str,
    kind: str,
    replicas: int | None,
    image: str | None,
    command: str | None,
    model: str | None,
    resources: str | None,
    env: tuple[str, ...],
    scaling_group: str | None,
    health_path: str | None,
    health_interval: float | None,
    health_timeout: float | None,
    healthy_threshold: int | None,
    unhealthy_threshold: int | None,
    initial_delay: float | None,
    public: bool,
    dry_run: bool,
    wait: bool,
    timeout: float,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """Create a deployment (or, with --dry-run, only show what it would run)."""
    if dry_run and wait:
        raise click.UsageError("--dry-run and --wait cannot be combined")
    body: dict[str, Any] = {"name": name, "type": kind, **({"open_to_public": True} if public else {})}
    optional: dict[str, Any] = {
        "replicas": replicas,
        "image": image,
        "command": command,
        "model": model,
        "resources": _resources(resources) if resources else None,
        "environ": _pairs(env, "--env") or None,
        "scaling_group": scaling_group,
        "health_check": _health_check(
            health_path,
            health_interval,
            health_timeout,
            healthy_threshold,
            unhealthy_threshold,
            initial_delay,
        ),
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    client = _client(api_url, token, config)
    with _api_errors():
        if dry_run:
            _, answer = client.request("POST", "/v2/deployments", body=body, query={"dry_run": True})
            _print_definition(answer, as_json)
            return
        _, made = client.request("POST", "/v2/deployments", body=body)
        if not wait:
            if as_json:
                _dump(made)
            else:
                click.echo(f"deployment {made['id']} ({made['name']}) created: {made['status']}")
                _print_token(made, err=False)
            return
        click.echo(f"deployment {made['id']} ({made['name']}) created", err=as_json)
        _print_token(made, err=as_json)
        try:
            final = follow_deployment(client, made["id"], err=as_json, timeout=timeout)
        except FollowTimeout as exc:
            raise click.ClickException(f"timed out after {timeout:g}s: {describe(exc.current)}") from None
    if as_json:
        _dump(final)
    sys.exit(0 if final["status"] == "READY" else 1)


def _print_token(made: dict[str, Any], *, err: bool) -> None:
    if made.get("token"):
        click.echo(f"token: {made['token']}", err=err)
        click.echo(
            "(the token will not be shown again: keep it; `sokovan deployment token` makes a new one)",
            err=err,
        )


def _print_definition(answer: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _dump(answer)
        return
    d = answer["definition"]
    hc = d["health_check"]
    click.echo(f"image:        {d['image']}")
    if d.get("command"):
        click.echo(f"command:      {d['command']}")
    click.echo(f"resources:    {slots_text(d['resources'])} per replica")
    if d.get("environ"):
        click.echo(f"environ:      {', '.join(f'{k}={v}' for k, v in d['environ'].items())}")
    click.echo(
        f"health check: GET {hc['path']} every {hc['interval']:g}s (timeout {hc['timeout']:g}s, "
        f"healthy after {hc['healthy_threshold']}, unhealthy after {hc['unhealthy_threshold']})"
    )
    click.echo("(dry run: nothing was created)")


@deployment.command()
@click.argument("ref", metavar="DEPLOYMENT")
@BYTES_OPTION
@click.option("--json", "as_json", is_flag=True)
@api_options
def info(
    ref: str, raw_bytes: bool, as_json: bool, api_url: str | None, token: str | None, config: str | None
) -> None:
    """Show one deployment (by id or name; memory in binary units, --bytes or --json for bytes)."""
    client = _client(api_url, token, config)
    with _api_errors():
        d = client.get(deployment_path(resolve(client, ref)))
    if as_json:
        _dump(d)
        return
    definition = d["definition"]
    status_info = d.get("status_info") or {}
    rows = [
        ("id", d["id"]),
        ("name", d["name"]),
        ("type", d["type"]),
        ("owner", d["owner"]),
        ("status", d["status"]),
        ("replicas", f"{d['ready_replicas']}/{d['replicas']} ready"),
        *_revision_rows(d),
        ("pending reason", status_info.get("pending_reason")),
        ("message", status_info.get("message")),
        ("endpoint", d.get("endpoint") or "(no app proxy registered)"),
        ("image", definition["image"]),
        ("command", definition["command"]),
        ("resources", slots_text(definition["resources"], raw=raw_bytes) + " per replica"),
        ("health check", f"GET {d['health_check']['path']} every {d['health_check']['interval']:g}s"),
        ("scaling group", d["scaling_group"]),
        ("created", d["created_at"]),
        ("status changed", d["status_changed_at"]),
        ("destroyed", d.get("destroyed_at")),
    ]
    for label, value in rows:
        if value not in (None, ""):
            click.echo(f"{label + ':':<16}{value}")


def _revision_rows(d: dict[str, Any]) -> list[tuple[str, Any]]:
    rollout = d.get("rollout")
    moving = None
    if rollout:
        way = "rolling back to" if rollout.get("rolled_back") else "rolling out"
        moving = (
            f"{way} revision {rollout['to_revision']} from {rollout['from_revision']} "
            f"({rollout['strategy'].get('type')}; rollback at {rollout.get('rollback_at')})"
        )
    a = d.get("autoscaling")
    rules = None
    if a:
        zero = f", to zero after {a['scale_to_zero_after']:g}s" if a.get("scale_to_zero_after") else ""
        rules = (
            f"{a['metric']} target {a['target']:g}/replica, {a['min_replicas']}-{a['max_replicas']} "
            f"replicas (cooldowns up {a['scale_up_cooldown']:g}s, down {a['scale_down_cooldown']:g}s{zero})"
        )
    return [
        ("revision", d.get("revision")),
        ("rollout", moving),
        ("autoscaling", rules),
        ("access", "open to the public" if d.get("open_to_public") else "token required"),
        ("backoff until", d.get("backoff_until")),
    ]


@deployment.command(name="list")
@click.option("--status", default=None, help="Comma-separated statuses.")
@click.option("--owner", default=None, help="User name (admins only).")
@click.option("--limit", type=int, default=100, show_default=True)
@click.option("--cursor", default=None, help="next_cursor of a previous page.")
@click.option("--json", "as_json", is_flag=True)
@api_options
def list_(
    status: str | None,
    owner: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """List deployments, newest first."""
    client = _client(api_url, token, config)
    with _api_errors():
        page = client.get("/v2/deployments", status=status, owner=owner, limit=limit, cursor=cursor)
    if as_json:
        _dump(page)
        return
    click.echo(f"{'ID':<36}  {'NAME':<20}  {'TYPE':<6}  {'STATUS':<10}  {'READY':<9}  {'OWNER':<12}  CREATED")
    for d in page["items"]:
        ready = f"{d['ready_replicas']}/{d['replicas']}"
        click.echo(
            f"{d['id']:<36}  {d['name'][:20]:<20}  {d['type']:<6}  {d['status']:<10}  {ready:<9}  "
            f"{d['owner'][:12]:<12}  {d['created_at']}"
        )
    if page.get("next_cursor"):
        click.echo(f"(more: --cursor {page['next_cursor']})")


@deployment.command()
@click.argument("ref", metavar="DEPLOYMENT")
@click.argument("replicas", type=int)
@click.option("--json", "as_json", is_flag=True)
@api_options
def scale(
    ref: str, replicas: int, as_json: bool, api_url: str | None, token: str | None, config: str | None
) -> None:
    """Set the target number of replicas."""
    client = _client(api_url, token, config)
    with _api_errors():
        _, d = client.request("PATCH", deployment_path(resolve(client, ref)), body={"replicas": replicas})
    if as_json:
        _dump(d)
    else:
        click.echo(f"deployment {d['id']} ({d['name']}): {d['status']}, target {d['replicas']} replica(s)")


@deployment.command()
@click.argument("ref", metavar="DEPLOYMENT")
@click.option("--json", "as_json", is_flag=True)
@api_options
def destroy(ref: str, as_json: bool, api_url: str | None, token: str | None, config: str | None) -> None:
    """Destroy a deployment: its replicas are terminated, then it is DESTROYED."""
    client = _client(api_url, token, config)
    with _api_errors():
        _, d = client.request("DELETE", deployment_path(resolve(client, ref)))
    if as_json:
        _dump(d)
    else:
        click.echo(f"deployment {d['id']} ({d['name']}): {d['status']}")


@deployment.command()
@click.argument("ref", metavar="DEPLOYMENT")
@click.option("--json", "as_json", is_flag=True)
@api_options
def routes(ref: str, as_json: bool, api_url: str | None, token: str | None, config: str | None) -> None:
    """List the deployment's routes (one per replica), oldest first."""
    client = _client(api_url, token, config)
    with _api_errors():
        items = client.paged(deployment_path(resolve(client, ref)) + "/routes", limit=500)
    if as_json:
        _dump({"items": items, "next_cursor": None})
        return
    click.echo(f"{'ID':<36}  {'STATUS':<15}  {'SESSION':<36}  {'HEALTH':<14}  ENDPOINT")
    for r in items:
        h = r["health"]
        health = f"+{h['consecutive_successes']}/-{h['consecutive_failures']} {h.get('last_status') or ''}"
        click.echo(
            f"{r['id']:<36}  {r['status']:<15}  {r.get('session_id') or '-':<36}  {health.strip():<14}  "
            f"{r.get('endpoint') or '-'}"
        )


@deployment.command()
@click.argument("ref", metavar="DEPLOYMENT|ROUTE")
@click.option("--route", "is_route", is_flag=True, help="REF is a route id: show that route's history.")
@click.option("--json", "as_json", is_flag=True)
@api_options
def history(
    ref: str, is_route: bool, as_json: bool, api_url: str | None, token: str | None, config: str | None
) -> None:
    """Show every handler run that touched the deployment (or, with --route, the route)."""
    client = _client(api_url, token, config)
    with _api_errors():
        if is_route:
            path = "/v2/routes/" + str(_route_id(ref)) + "/history"
        else:
            path = deployment_path(resolve(client, ref)) + "/history"
        items = client.paged(path, limit=500)
    if as_json:
        _dump({"items": items, "next_cursor": None})
        return
    click.echo(f"{'TIME':<32}  {'HANDLER':<24}  {'RESULT':<7}  {'FROM -> TO':<26}  MESSAGE")
    for h in items:
        move = f"{h.get('from_status') or '-'} -> {h.get('to_status') or '-'}"
        stamp, handler, message = h["created_at"], h["handler"][:24], h.get("message") or ""
        click.echo(f"{stamp:<32}  {handler:<24}  {h['result']:<7}  {move:<26}  {message}")


def _route_id(ref: str) -> uuid.UUID:
    try:
        return uuid.UUID(ref)
    except ValueError:
        raise click.BadParameter(f"a route id is a UUID, got {ref!r}", param_hint="ROUTE") from None
