"""`sokovan admin bootstrap`: the default tenancy and a fresh admin keypair, straight in PostgreSQL."""

from __future__ import annotations

import asyncio
import json

import click

from sokovan.cli.common import config_option, load_or_exit
from sokovan.db.engine import make_engine
from sokovan.manager.repositories.tenancy import bootstrap as bootstrap_tenancy


@click.group()
def admin() -> None:
    """Administration commands that work on the database directly."""


async def _bootstrap(db_url: str) -> tuple[str, str]:
    engine = make_engine(db_url, pool_size=1)
    try:
        return await bootstrap_tenancy(engine)
    finally:
        await engine.dispose()


@admin.command()
@click.option("--json", "as_json", is_flag=True, help='Print only {"access_key": ..., "token": ...}.')
@config_option
def bootstrap(as_json: bool, config: str | None) -> None:
    """Create the default domain, project, scaling group and admin user if missing, and a NEW
    admin keypair (tokens are stored hashed, so an earlier one cannot be shown again)."""
    settings = load_or_exit(config)
    try:
        access_key, token = asyncio.run(_bootstrap(settings.db_url))
    except Exception as exc:  # a CLI prints a message, never a stack trace
        raise click.ClickException(
            f"bootstrap failed ({type(exc).__name__}): {str(exc).splitlines()[0] if str(exc) else exc!r}\n"
            "Is PostgreSQL reachable at SOKOVAN_DB_URL, and has `sokovan db upgrade` been run?"
        ) from exc
    if as_json:
        click.echo(json.dumps({"access_key": access_key, "token": token}))
        return
    click.echo(f"access key: {access_key}")
    click.echo(f"token:      {token}")
    click.echo("Keep the token: it is shown only once. Use it as SOKOVAN_TOKEN.")
