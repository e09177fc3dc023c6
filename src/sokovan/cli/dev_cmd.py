"""`sokovan dev`."""

from __future__ import annotations

import click

from sokovan.cli.log_format import log_format_option, start_logging


@click.command()
@click.option(
    "--fresh",
    is_flag=True,
    help="Start from an empty state: drop and recreate the dev database, remove the agents' work "
    "directories and the cluster's keys in Redis (`make dev-reset`).",
)
@log_format_option
def dev(fresh: bool, log_format: str | None) -> None:
    """Everything on one machine: services, a manager, two agents and the app proxy.

    The services' addresses come from .env.services (scripts/services.py, as for `make services`);
    the database is `sokovan` on that server. The two agents share the host's CPUs and memory.
    State (sessions, agents' work directories) is kept between runs unless --fresh; sessions
    running at Ctrl-C come back as ERROR.

    --log-format (or SOKOVAN_LOG_FORMAT) is passed on to the manager, agents and proxy it starts:
    json lines, or console text (the default when stderr is a terminal). Their output is also
    written to .dev/logs/<name>.log.
    """
    from sokovan.devenv import DevError, run_dev

    start_logging("dev", log_format)
    try:
        run_dev(fresh=fresh)
    except DevError as exc:
        raise click.ClickException(str(exc)) from exc
