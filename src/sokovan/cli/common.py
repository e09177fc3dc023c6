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


def load_with_secret(config: str | None, refusal: str) -> Settings:
    """The settings of a daemon that needs the cluster secret; without one, `refusal` ends the command."""
    settings = load_or_exit(config)
    if not settings.cluster_secret:
        raise click.ClickException(f"SOKOVAN_CLUSTER_SECRET is not set: {refusal}")
    return settings
