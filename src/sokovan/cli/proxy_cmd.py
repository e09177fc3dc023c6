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
from sokovan.proxy.config import ProxyConfig

DEFAULTS = ProxyConfig()


def parse_bind(value: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:8091` for IPv6) → (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}", param_hint="--bind")
    return host.removeprefix("[").removesuffix("]"), int(port)


async def _serve(settings: Settings, config: ProxyConfig) -> None:
    from sokovan.proxy import AppProxy

    await AppProxy(settings, config).run(stop_on_signals())


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
@click.option(
    "--max-per-client",
    type=click.IntRange(1, 100_000),
    default=DEFAULTS.max_per_client,
    show_default=True,
    help="Requests in flight per client address and deployment, past which the answer is 429.",
)
@click.option(
    "--header-timeout",
    type=click.FloatRange(0.1, 3600),
    default=DEFAULTS.header_timeout,
    show_default=True,
    help="Seconds a client has to send its complete request headers.",
)
@click.option(
    "--body-timeout",
    type=click.FloatRange(0.1, 3600),
    default=DEFAULTS.body_timeout,
    show_default=True,
    help="Seconds a request body may go without a byte before the client is cut off.",
)
@click.option(
    "--connect-timeout",
    type=click.FloatRange(0.1, 600),
    default=DEFAULTS.connect_timeout,
    show_default=True,
    help="Seconds to connect to a replica before trying the next one.",
)
@log_format_option
def proxy(
    config: str | None,
    bind: str,
    public_url: str | None,
    probe_concurrency: int,
    max_per_client: int,
    header_timeout: float,
    body_timeout: float,
    connect_timeout: float,
    log_format: str | None,
) -> None:
    """Run the app proxy: forward /<deployment>/... to HEALTHY replicas, probe their health."""
    settings = load_with_secret(config, "the proxy refuses to start without it")
    host, port = parse_bind(bind)
    start_logging("proxy", log_format, secrets=[settings.cluster_secret])
    from sokovan.proxy import ProxyStartError

    proxy_config = ProxyConfig(
        host=host,
        port=port,
        public_url=public_url,
        probe_concurrency=probe_concurrency,
        max_per_client=max_per_client,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        connect_timeout=connect_timeout,
    )
    try:
        eventloop.run(_serve(settings, proxy_config))
    except ProxyStartError as exc:
        raise click.ClickException(str(exc)) from exc
