"""`sokovan manager`."""

from __future__ import annotations

import click

from sokovan.cli.common import config_option, load_or_exit
from sokovan.common.logging import setup_logging


@click.command()
@config_option
def manager(config: str | None) -> None:
    """Run the manager: REST v2 API + SokovanOrchestrator."""
    settings = load_or_exit(config)
    if not settings.cluster_secret:
        raise click.ClickException(
            "SOKOVAN_CLUSTER_SECRET is not set: the manager refuses to start without it"
        )
    setup_logging()
    from sokovan.manager.daemon import serve

    serve(settings)
