"""`--log-format json|console`, shared by the daemons' commands (`manager`, `agent`, `proxy`, `dev`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import click

from sokovan.common.logging import FORMATS, LOG_FORMAT_ENV, setup_logging

F = TypeVar("F", bound=Callable[..., Any])

HELP = (
    "Log lines on stderr: json (one object a line: timestamp, level, event, daemon, ids) or "
    "console; default json, console when stderr is a terminal."
)


def log_format_option(func: F) -> F:
    return click.option(
        "--log-format",
        "log_format",
        type=click.Choice(FORMATS),
        default=None,
        envvar=LOG_FORMAT_ENV,
        show_envvar=True,
        help=HELP,
    )(func)


def start_logging(
    daemon: str,
    log_format: str | None,
    *,
    context: Mapping[str, str] | None = None,
    secrets: Iterable[str | None] = (),
) -> str:
    """Set up logging for `daemon` and export the format in force in SOKOVAN_LOG_FORMAT, so that
    the processes it starts (the manager's workers, `dev`'s daemons) log the same way."""
    fmt = setup_logging(daemon, log_format, context=context, secrets=[s for s in secrets if s])
    os.environ[LOG_FORMAT_ENV] = fmt
    return fmt
