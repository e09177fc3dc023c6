"""`sokovan manager`."""

from __future__ import annotations

import click

from sokovan.cli.common import config_option, load_with_secret
from sokovan.cli.log_format import log_format_option, start_logging
from sokovan.manager.workers import WorkersType


@click.command()
@config_option
@click.option(
    "--workers",
    type=WorkersType(),
    default="auto",
    show_default=True,
    envvar="SOKOVAN_MANAGER_WORKERS",
    help="Manager processes sharing the API port, each a whole manager: auto is one per core (at most 4).",
)
@click.option("--reuse-port", is_flag=True, hidden=True, help="Bind the API port with SO_REUSEPORT.")
@log_format_option
def manager(config: str | None, workers: int, reuse_port: bool, log_format: str | None) -> None:
    """Run the manager: REST v2 API + SokovanOrchestrator."""
    settings = load_with_secret(config, "the manager refuses to start without it")
    start_logging("manager", log_format, secrets=[settings.cluster_secret])
    from sokovan.manager.daemon import ManagerFailed, serve

    try:
        serve(settings, workers=workers, reuse_port=reuse_port)
    except ManagerFailed as exc:  # one line on stderr, exit status 1
        raise click.ClickException(f"the manager stopped: {exc}") from exc
