"""`sokovan trace export`: the cluster's recent sessions and agents as a trace (JSON Lines,
docs/trace-format.md) for `sokovan simulate`. Reads PostgreSQL directly (SOKOVAN_DB_URL)."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

import click

from sokovan.cli.common import config_option, load_or_exit
from sokovan.cli.units import span_seconds
from sokovan.db.engine import make_engine
from sokovan.sim.export import export_trace
from sokovan.sim.trace import Trace, write_trace


@click.group()
def trace() -> None:
    """Traces of the cluster's history, for `sokovan simulate`."""


async def _export(db_url: str, since: dt.datetime) -> Trace:
    engine = make_engine(db_url, pool_size=1, max_overflow=0)
    try:
        async with engine.connect() as conn:
            return await export_trace(conn, since)
    finally:
        await engine.dispose()


@trace.command()
@click.option(
    "--since",
    "since_text",
    required=True,
    metavar="DURATION",
    help="How far back: `7d`, `12h`, `30m`, `90s` (sessions alive at any moment since then).",
)
@click.option(
    "--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="The file to write."
)
@config_option
def export(since_text: str, out: Path, config: str | None) -> None:
    """Write the sessions alive since DURATION ago, with the agents and scaling groups, to FILE."""
    seconds = span_seconds(since_text, "--since")
    settings = load_or_exit(config)
    since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
    try:
        found = asyncio.run(_export(settings.db_url, since))
    except Exception as exc:  # a CLI prints a message, never a stack trace
        first = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise click.ClickException(
            f"export failed ({type(exc).__name__}): {first}\nIs PostgreSQL reachable at SOKOVAN_DB_URL?"
        ) from exc
    try:
        write_trace(found, out)
    except OSError as exc:
        raise click.ClickException(f"cannot write {out}: {exc.strerror or exc}") from exc
    counts = f"{len(found.sessions)} sessions, {len(found.agents)} agents, {len(found.groups)} scaling groups"
    click.echo(f"{counts} → {out}")
