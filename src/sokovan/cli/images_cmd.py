"""`sokovan images build`: the default kernel images, built from the host and pushed to a registry."""

from __future__ import annotations

import asyncio

import click

from sokovan.images.builder import build_default_images
from sokovan.images.engine import engine_url
from sokovan.images.errors import ImagesError
from sokovan.images.host_tools import ensure_host_tools


@click.group()
def images() -> None:
    """The default kernel images (shell, python)."""


@images.command()
@click.option("--registry", required=True, metavar="HOST:PORT", help="The registry to push to.")
@click.option(
    "--engine",
    default=None,
    metavar="URL",
    help="The engine (unix:///path or tcp://host:port); default DOCKER_HOST, else "
    "unix:///run/podman/podman.sock when it exists, else unix:///var/run/docker.sock.",
)
def build(registry: str, engine: str | None) -> None:
    """Build HOST:PORT/shell:latest and HOST:PORT/python:3 from this machine's files and push them.

    Prints `<reference> <digest>` per image. An image whose tag already holds the same build
    context is not built or pushed again.
    """
    url = engine_url(engine)

    def progress(line: str) -> None:
        click.echo(line, err=True)

    ensure_host_tools(progress)
    try:
        outcomes = asyncio.run(build_default_images(url, registry, progress=progress))
    except ImagesError as exc:
        raise click.ClickException(str(exc)) from exc
    except Exception as exc:  # a CLI prints a message, never a stack trace
        raise click.ClickException(f"images build failed: {type(exc).__name__}: {exc}") from exc
    for outcome in outcomes:
        click.echo(f"{outcome.reference} {outcome.digest}")
