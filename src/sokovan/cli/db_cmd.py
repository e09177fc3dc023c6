"""`sokovan db upgrade`."""

from __future__ import annotations

import click

from sokovan.cli.common import config_option, load_or_exit
from sokovan.db import migrate


@click.group()
def db() -> None:
    """Database schema commands."""


@db.command()
@config_option
def upgrade(config: str | None) -> None:
    """Apply every migration (alembic upgrade head)."""
    settings = load_or_exit(config)
    try:
        migrate.upgrade(settings.db_url)
    except Exception as exc:  # a CLI prints a message, never a stack trace
        raise click.ClickException(f"migration failed: {exc}") from exc
    click.echo("database is at the newest revision")
