"""`sokovan dev`."""

from __future__ import annotations

import click

from sokovan.common.logging import setup_logging


@click.command()
def dev() -> None:
    """Everything on one machine: services, a manager and two process agents."""
    from sokovan.devenv import DevError, run_dev

    setup_logging()
    try:
        run_dev()
    except DevError as exc:
        raise click.ClickException(str(exc)) from exc
