"""`sokovan proxy`: the app proxy, forwarding `/<deployment>/<rest>` to HEALTHY replicas and probing them.

It reads `SOKOVAN_REDIS_URL`, `SOKOVAN_CLUSTER_SECRET` (required) and `SOKOVAN_ETCD_PREFIX` (the key
prefix) like the other daemons; `--bind` and `--public-url` may also come from `SOKOVAN_PROXY_BIND`
and `SOKOVAN_PROXY_PUBLIC_URL`, `--log-format` from `SOKOVAN_LOG_FORMAT`. SIGINT and SIGTERM stop it cleanly.
"""

from __future__ import annotations

import click

from sokovan.cli.common import config_option, load_with_secret
from sokovan.cli.log_format import log_format_option, start_logging
from sokovan.common import eventloop
from sokovan.common.lifecycle import stop_on_signals
from sokovan.common.settings import Settings


def parse_bind(value: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:8091` for IPv6) → (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}", param_hint="--bind")
    return host.removeprefix("[").removesuffix("]"), int(port)


async def _serve(settings: Settings, host: str, port: int, public_url: str | None, concurrency: int) -> None:
    from sokovan.proxy import AppProxy, ProxyConfig

    proxy = AppProxy(
        settings, ProxyConfig(host=host, port=port, public_url=public_url, probe_concurrency=concurrency)
    )
    await proxy.run(stop_on_signals())


@click.command()
@config_option
@click.option(
    "--bind",
    default="127.0.0.1:8091",
    show_default=True,
    envvar="SOKOVAN_PROXY_BIND",
    help="HOST:PORT to listen on (port 0 picks a free one).",
)
@click.option(
    "--public-url",
    default=None,
    envvar="SOKOVAN_PROXY_PUBLIC_URL",
    help="The URL registered for deployments' endpoints (default: http://HOST:PORT).",
)
@click.option(
    "--probe-concurrency",
    type=click.IntRange(1, 10_000),
    default=64,
    show_default=True,
    help="Health probes in flight at most.",
)
@log_format_option
def proxy(
    config: str | None, bind: str, public_url: str | None, probe_concurrency: int, log_format: str | None
) -> None:
    """Run the app proxy: forward /<deployment>/... to HEALTHY replicas, probe their health."""
    settings = load_with_secret(config, "the proxy refuses to start without it")
    host, port = parse_bind(bind)
    start_logging("proxy", log_format, secrets=[settings.cluster_secret])
    from sokovan.proxy import ProxyStartError

    try:
        eventloop.run(_serve(settings, host, port, public_url, probe_concurrency))
    except ProxyStartError as exc:
        raise click.ClickException(str(exc)) from exc
