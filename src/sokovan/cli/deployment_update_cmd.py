"""`sokovan deployment update|rollback|token|autoscale`: a deployment's revisions, access token
and autoscaling (REST v2 client; `deployment_cmd` adds them to the `deployment` group).

`update --wait` and `rollback --wait` follow the deployment (`deployment_follow`) until it is
READY at the revision the command started, every replica HEALTHY; an update rolled back meanwhile
is reported and exits 1.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from sokovan.cli.client import ApiClient
from sokovan.cli.deployment_follow import (
    FollowTimeout,
    at_revision,
    deployment_path,
    describe,
    follow_deployment,
    resolve,
    update_settled,
)
from sokovan.cli.session_cmd import _api_errors, _client, _dump, _pairs, _resources, api_options

DEFAULT_TIMEOUT = 600.0
WAIT = click.option("--wait", is_flag=True, help="Follow it until READY at the new revision.")
TIMEOUT = click.option(
    "--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True, help="Seconds --wait waits."
)
JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON (with --wait: the final deployment).")


def _amount(value: str | None, option: str) -> int | str | None:
    """A number of replicas (sent as a number) or a percentage ("25%")."""
    if value is None:
        return None
    if value.endswith("%"):
        return value
    try:
        return int(value)
    except ValueError:
        raise click.BadParameter(
            f"a number or a percentage like 25%, got {value!r}", param_hint=option
        ) from None


def _strategy(kind: str | None, surge: str | None, unavailable: str | None) -> dict[str, Any] | None:
    if kind == "blue_green":
        if surge is not None or unavailable is not None:
            raise click.UsageError("--max-surge and --max-unavailable apply to --strategy rolling")
        return {"type": "blue_green"}
    if kind is None and surge is None and unavailable is None:
        return None
    strategy: dict[str, Any] = {"type": "rolling"}
    for key, value, option in (
        ("max_surge", surge, "--max-surge"),
        ("max_unavailable", unavailable, "--max-unavailable"),
    ):
        amount = _amount(value, option)
        if amount is not None:
            strategy[key] = amount
    return strategy


def _followed(client: ApiClient, d: dict[str, Any], as_json: bool, timeout: float) -> None:
    """Follow `d` until its current revision settles; exit 0 when READY at it, 1 otherwise."""
    revision = int(d["revision"])
    try:
        final = follow_deployment(
            client, str(d["id"]), err=as_json, timeout=timeout, until=update_settled(revision)
        )
    except FollowTimeout as exc:
        raise click.ClickException(f"timed out after {timeout:g}s: {describe(exc.current)}") from None
    if as_json:
        _dump(final)
    if final["status"] == "READY" and at_revision(final, revision):
        click.echo(f"deployment {final['id']} ({final['name']}): READY at revision {revision}", err=as_json)
        sys.exit(0)
    rollout = final.get("rollout") or {}
    if rollout.get("rolled_back") or final.get("revision") != revision:
        click.echo(
            f"revision {revision} was rolled back: the deployment runs revision {final.get('revision')} "
            f"({final['status']})",
            err=True,
        )
    sys.exit(1)


def _answer(
    client: ApiClient, d: dict[str, Any], what: str, wait: bool, as_json: bool, timeout: float
) -> None:
    if wait:
        click.echo(f"deployment {d['id']} ({d['name']}): {what}", err=as_json)
        _followed(client, d, as_json, timeout)
    if as_json:
        _dump(d)
    else:
        click.echo(f"deployment {d['id']} ({d['name']}): {what}; {describe(d)}")


@click.command()
@click.argument("ref", metavar="DEPLOYMENT")
@click.option("--image", default=None, help="The new image.")
@click.option("--model", default=None, help="vllm, tgi, sglang: the new model.")
@click.option("--command", default=None, help="custom: the new command line (listening on $PORT).")
@click.option("--env", "env", multiple=True, help="KEY=VALUE, repeatable: replaces the environment.")
@click.option("--resources", default=None, help="Per replica, e.g. cpu=1,mem=256m.")
@click.option("--health-path", default=None, help="The new health check path.")
@click.option("--strategy", "kind", type=click.Choice(["rolling", "blue_green"]), default=None)
@click.option("--max-surge", default=None, help="rolling: replicas above the target (N or P%; default 1).")
@click.option("--max-unavailable", default=None, help="rolling: HEALTHY replicas short (N or P%; default 0).")
@click.option("--rollback-after", type=float, default=None, help="Seconds without a HEALTHY replica (600).")
@WAIT
@TIMEOUT
@JSON
@api_options
def update(
    ref: str,
    image: str | None,
    model: str | None,
    command: str | None,
    env: tuple[str, ...],
    resources: str | None,
    health_path: str | None,
    kind: str | None,
    max_surge: str | None,
    max_unavailable: str | None,
    rollback_after: float | None,
    wait: bool,
    timeout: float,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """Roll out a new definition (a new revision): the given fields over the current ones."""
    body: dict[str, Any] = {
        k: v
        for k, v in {
            "image": image,
            "model": model,
            "command": command,
            "environ": _pairs(env, "--env") if env else None,
            "resources": _resources(resources) if resources else None,
            "health_check": {"path": health_path} if health_path else None,
            "strategy": _strategy(kind, max_surge, max_unavailable),
            "rollback_after": rollback_after,
        }.items()
        if v is not None
    }
    if not {"image", "model", "command", "environ", "resources", "health_check"} & body.keys():
        raise click.UsageError(
            "give something to change: --image, --model, --command, --env, --resources ..."
        )
    client = _client(api_url, token, config)
    with _api_errors():
        status, d = client.request("PATCH", deployment_path(resolve(client, ref)), body=body)
        what = f"revision {d['revision']} rolling out" if status == 202 else "nothing changed"
        _answer(client, d, what, wait and status == 202, as_json, timeout)


@click.command()
@click.argument("ref", metavar="DEPLOYMENT")
@WAIT
@TIMEOUT
@JSON
@api_options
def rollback(
    ref: str,
    wait: bool,
    timeout: float,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """Back to the last good revision (the running update's, or the previous definition)."""
    client = _client(api_url, token, config)
    with _api_errors():
        _, d = client.request("POST", deployment_path(resolve(client, ref)) + "/rollback")
        _answer(client, d, f"rolling back to revision {d['revision']}", wait, as_json, timeout)


@click.command(name="token")
@click.argument("ref", metavar="DEPLOYMENT")
@api_options
def token_(ref: str, api_url: str | None, token: str | None, config: str | None) -> None:
    """Make a new access token (printed once); the old one stops working within seconds."""
    client = _client(api_url, token, config)
    with _api_errors():
        _, answer = client.request("POST", deployment_path(resolve(client, ref)) + "/token")
    click.echo(answer["token"])


@click.command()
@click.argument("ref", metavar="DEPLOYMENT")
@click.option("--metric", type=click.Choice(["inflight", "rps"]), default=None)
@click.option("--target", type=float, default=None, help="The metric's target per replica.")
@click.option("--min", "min_replicas", type=int, default=None)
@click.option("--max", "max_replicas", type=int, default=None)
@click.option("--up-cooldown", type=float, default=None, help="Seconds between scale-ups (default 30).")
@click.option("--down-cooldown", type=float, default=None, help="Seconds between scale-downs (default 120).")
@click.option(
    "--zero-after", type=float, default=None, help="Idle seconds before 0 replicas (default never)."
)
@click.option("--off", is_flag=True, help="Stop autoscaling (replicas stay as they are).")
@JSON
@api_options
def autoscale(
    ref: str,
    metric: str | None,
    target: float | None,
    min_replicas: int | None,
    max_replicas: int | None,
    up_cooldown: float | None,
    down_cooldown: float | None,
    zero_after: float | None,
    off: bool,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """Let the autoscaler own the replicas (or, with --off, hand them back)."""
    rules: dict[str, Any] | None = None
    if off:
        if any(
            v is not None
            for v in (metric, target, min_replicas, max_replicas, up_cooldown, down_cooldown, zero_after)
        ):
            raise click.UsageError("--off takes no other option")
    else:
        if metric is None or target is None or min_replicas is None or max_replicas is None:
            raise click.UsageError("--metric, --target, --min and --max are required (or --off)")
        rules = {
            "metric": metric,
            "target": target,
            "min_replicas": min_replicas,
            "max_replicas": max_replicas,
        }
        optional = {
            "scale_up_cooldown": up_cooldown,
            "scale_down_cooldown": down_cooldown,
            "scale_to_zero_after": zero_after,
        }
        rules.update({k: v for k, v in optional.items() if v is not None})
    client = _client(api_url, token, config)
    with _api_errors():
        _, d = client.request("PATCH", deployment_path(resolve(client, ref)), body={"autoscaling": rules})
    if as_json:
        _dump(d)
        return
    a = d.get("autoscaling")
    state = "autoscaling off"
    if a:
        bounds = f"{a['min_replicas']}-{a['max_replicas']} replicas"
        state = f"autoscaling on {a['metric']} (target {a['target']:g} per replica, {bounds})"
    click.echo(f"deployment {d['id']} ({d['name']}): {state}, target {d['replicas']} replica(s)")


COMMANDS = (update, rollback, token_, autoscale)
