"""The `sokovan` console script: one click group; each command family lives in its own module,
imported only when that command runs (or `--help` lists them all).

A command run imports its own module, not the fifteen: the agent's daemon, alembic and aiodocker
alone took a second to import, which every `sokovan session list` used to pay.
"""

from __future__ import annotations

import importlib

import click

# command name → (module path, attribute holding its click command or group)
COMMANDS: dict[str, tuple[str, str]] = {
    "db": ("sokovan.cli.db_cmd", "db"),
    "manager": ("sokovan.cli.manager_cmd", "manager"),
    "dev": ("sokovan.cli.dev_cmd", "dev"),
    "agent": ("sokovan.cli.agent_cmd", "agent"),
    "session": ("sokovan.cli.session_cmd", "session"),
    "deployment": ("sokovan.cli.deployment_cmd", "deployment"),
    "node": ("sokovan.cli.node_cmd", "node"),
    "scaling-group": ("sokovan.cli.scaling_group_cmd", "scaling_group"),
    "admin": ("sokovan.cli.admin_cmd", "admin"),
    "config": ("sokovan.cli.config_cmd", "config"),
    "proxy": ("sokovan.cli.proxy_cmd", "proxy"),
    "completion": ("sokovan.cli.completion_cmd", "completion"),
    "images": ("sokovan.cli.images_cmd", "images"),
    "trace": ("sokovan.cli.trace_cmd", "trace"),
    "simulate": ("sokovan.cli.simulate_cmd", "simulate"),
}


def load(name: str) -> click.Command:
    """The command `name` (a key of COMMANDS), its module imported now."""
    module_path, attr = COMMANDS[name]
    command = getattr(importlib.import_module(module_path), attr)
    assert isinstance(command, click.Command) and command.name == name, (module_path, attr)
    return command


class LazyGroup(click.Group):
    """A group whose commands are imported on first use (click's lazy-loading recipe)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.add_command(load(cmd_name))
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup)
@click.version_option(package_name="sokovan")
def cli() -> None:
    """Sokovan: a cluster session orchestrator."""


def main() -> None:
    cli(prog_name="sokovan")
