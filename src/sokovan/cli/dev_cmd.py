"""`sokovan dev`."""

from __future__ import annotations

import click

from sokovan.cli.log_format import log_format_option, start_logging


@click.command()
@log_format_option
def dev(log_format: str | None) -> None:
    """Everything on one machine: services, a manager and two process agents.

    --log-format (or SOKOVAN_LOG_FORMAT) is passed on to the manager, agents and proxy it starts:
    json lines, or console text (the default when stderr is a terminal).
    """
    from sokovan.devenv import DevError, run_dev

    start_logging("dev", log_format)
    try:
        run_dev()
    except DevError as exc:
        raise click.ClickException(str(exc)) from exc
