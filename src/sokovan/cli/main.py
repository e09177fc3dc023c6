"""The `sokovan` console script: one click group; each command family lives in its own module."""

from __future__ import annotations

import importlib

import click

# module path → attribute holding a click command or group
COMMANDS: list[tuple[str, str]] = [
    ("sokovan.cli.db_cmd", "db"),
    ("sokovan.cli.manager_cmd", "manager"),
    ("sokovan.cli.dev_cmd", "dev"),
    ("sokovan.cli.agent_cmd", "agent"),
    ("sokovan.cli.session_cmd", "session"),
    ("sokovan.cli.deployment_cmd", "deployment"),
    ("sokovan.cli.node_cmd", "node"),
    ("sokovan.cli.scaling_group_cmd", "scaling_group"),
    ("sokovan.cli.admin_cmd", "admin"),
    ("sokovan.cli.config_cmd", "config"),
    ("sokovan.cli.proxy_cmd", "proxy"),
    ("sokovan.cli.completion_cmd", "completion"),
    ("sokovan.cli.images_cmd", "images"),
    ("sokovan.cli.trace_cmd", "trace"),
    ("sokovan.cli.simulate_cmd", "simulate"),
]


@click.group()
@click.version_option(package_name="sokovan")
def cli() -> None:
    """Sokovan: a cluster session orchestrator."""


for module_name, attr in COMMANDS:
    cli.add_command(getattr(importlib.import_module(module_name), attr))


def main() -> None:
    cli(prog_name="sokovan")
