"""Options and helpers the command modules share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from sokovan.common.settings import ConfigFileError, Settings, load_settings

F = TypeVar("F", bound=Callable[..., Any])


def config_option(func: F) -> F:
    return click.option(
        "--config", "config", type=click.Path(dir_okay=False), default=None, help="TOML config file."
    )(func)


def load_or_exit(config: str | None) -> Settings:
    try:
        return load_settings(config)
    except ConfigFileError as exc:
        raise click.ClickException(str(exc)) from exc
