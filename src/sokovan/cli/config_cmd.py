"""`sokovan config retry-default get/set`: the cluster retry default in etcd, through REST v2.

`get` prints the default in force. `set` replaces it (admins only): with a JSON object, exactly
that object (fields left out take the built-in defaults); with options only, the value in force
with those fields changed; with both, the JSON object with the options applied on top.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from sokovan.cli.session_cmd import _api_errors, _client, _dump, api_options

PATH = "/v2/config/retry-policy-default"


@click.group()
def config() -> None:
    """Cluster-wide settings kept in etcd (admin)."""


@config.group(name="retry-default")
def retry_default() -> None:
    """The cluster retry default: the RetryPolicy a session gets when neither it, its project
    nor its domain sets a field (shipped: max_retries 0, no retries)."""


@retry_default.command()
@api_options
def get(api_url: str | None, token: str | None, config: str | None) -> None:
    """Print the cluster retry default in force, as JSON."""
    client = _client(api_url, token, config)
    with _api_errors():
        _dump(client.get(PATH))


def _parse_json(text: str) -> dict[str, Any]:
    raw = sys.stdin.read() if text == "-" else text
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="POLICY_JSON") from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint="POLICY_JSON")
    return value


_NULL = object()  # an option given as 'none': the field is sent as null


def _optional_delay(value: str | None) -> object:
    if value is None:
        return None
    if value.strip().lower() in {"none", "null"}:
        return _NULL
    try:
        return float(value)
    except ValueError:
        raise click.BadParameter(f"expected seconds or 'none', got {value!r}") from None


@retry_default.command(name="set")
@click.argument("policy_json", required=False)
@click.option("--max-retries", type=int, default=None, help="Retries after the first attempt (0: none).")
@click.option("--retry-delay", type=float, default=None, help="Seconds before a retry (the base).")
@click.option("--backoff", type=click.Choice(["fixed", "exponential"]), default=None)
@click.option("--backoff-multiplier", type=float, default=None, help="Exponential growth per retry.")
@click.option("--max-retry-delay", default=None, help="Cap in seconds, or 'none' (the 24 h ceiling).")
@click.option("--jitter", type=click.Choice(["none", "deterministic", "random"]), default=None)
@click.option("--jitter-ratio", type=float, default=None, help="0 to 1: the jitter's share of the delay.")
@click.option("--eligible-causes", default=None, help="Comma-separated causes that may be retried.")
@click.option("--emit-retry-events/--no-emit-retry-events", default=None)
@api_options
def set_(
    policy_json: str | None,
    max_retries: int | None,
    retry_delay: float | None,
    backoff: str | None,
    backoff_multiplier: float | None,
    max_retry_delay: str | None,
    jitter: str | None,
    jitter_ratio: float | None,
    eligible_causes: str | None,
    emit_retry_events: bool | None,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """Replace the cluster retry default (admin).

    POLICY_JSON is a RetryPolicy object ('-' reads it from stdin), e.g.
    '{"max_retries": 2, "backoff": "exponential"}'. Without it, the options change the value in
    force. The server validates it (nothing is written when it is invalid); every manager applies
    it to its next retry decision without a restart."""
    options: dict[str, Any] = {
        "max_retries": max_retries,
        "retry_delay": retry_delay,
        "backoff": backoff,
        "backoff_multiplier": backoff_multiplier,
        "max_retry_delay": _optional_delay(max_retry_delay),
        "jitter": jitter,
        "jitter_ratio": jitter_ratio,
        "eligible_causes": (
            [c.strip() for c in eligible_causes.split(",") if c.strip()]
            if eligible_causes is not None
            else None
        ),
        "emit_retry_events": emit_retry_events,
    }
    changes = {k: (None if v is _NULL else v) for k, v in options.items() if v is not None}
    if policy_json is None and not changes:
        raise click.UsageError("give a POLICY_JSON object or at least one option")
    client = _client(api_url, token, config)
    with _api_errors():
        body = _parse_json(policy_json) if policy_json is not None else client.get(PATH)
        body.update(changes)
        _, stored = client.request("PUT", PATH, body=body)
    _dump(stored)


NODE_PATH = "/v2/config/node-lifecycle"


@config.group(name="node-lifecycle")
def node_lifecycle() -> None:
    """Heartbeat timings: interval, timeout, grace per agent class, boot timeout (seconds)."""


@node_lifecycle.command(name="get")
@api_options
def node_get(api_url: str | None, token: str | None, config: str | None) -> None:
    """Print the node timings in force, as JSON."""
    client = _client(api_url, token, config)
    with _api_errors():
        _dump(client.get(NODE_PATH))


@node_lifecycle.command(name="set")
@click.argument("timings_json", required=False)
@click.option("--heartbeat-interval", type=float, default=None, help="Seconds between an agent's beats.")
@click.option("--heartbeat-timeout", type=float, default=None, help="Silence before an agent is DEGRADED.")
@click.option(
    "--grace",
    "graces",
    multiple=True,
    metavar="CLASS=SECONDS",
    help="Grace before a DEGRADED agent of CLASS (standard, sensitive, borrowed) is DOWN; repeatable.",
)
@click.option("--boot-timeout", type=float, default=None, help="Seconds an agent may stay BOOTING.")
@api_options
def node_set(
    timings_json: str | None,
    heartbeat_interval: float | None,
    heartbeat_timeout: float | None,
    graces: tuple[str, ...],
    boot_timeout: float | None,
    api_url: str | None,
    token: str | None,
    config: str | None,
) -> None:
    """Replace the node timings (admin): TIMINGS_JSON whole, or the options over the value in force.
    The server validates them (the timeout must be longer than the interval); nothing is written
    when they are invalid."""
    changes: dict[str, Any] = {
        k: v
        for k, v in (
            ("heartbeat_interval", heartbeat_interval),
            ("heartbeat_timeout", heartbeat_timeout),
            ("boot_timeout", boot_timeout),
        )
        if v is not None
    }
    grace: dict[str, float] = {}
    for item in graces:
        name, sep, seconds = item.partition("=")
        try:
            if not sep:
                raise ValueError(item)
            grace[name.strip()] = float(seconds)
        except ValueError:
            raise click.BadParameter(f"expected CLASS=SECONDS, got {item!r}", param_hint="--grace") from None
    if timings_json is None and not changes and not grace:
        raise click.UsageError("give a TIMINGS_JSON object or at least one option")
    client = _client(api_url, token, config)
    with _api_errors():
        body = _parse_json(timings_json) if timings_json is not None else client.get(NODE_PATH)
        body.update(changes)
        if grace:
            body["grace_period"] = {**body.get("grace_period", {}), **grace}
        _, stored = client.request("PUT", NODE_PATH, body=body)
    _dump(stored)
