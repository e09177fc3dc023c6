"""The `sokovan` group imports a command's module only when that command runs."""

from __future__ import annotations

import subprocess
import sys

import click

from sokovan.cli.main import COMMANDS, cli, load

PROBE = """
import sys
from sokovan.cli.main import cli
try:
    cli([{args}], prog_name="sokovan")
except SystemExit:
    pass
print(sorted(m for m in sys.modules if m.startswith("sokovan.cli.") and m.endswith("_cmd")))
print("heavy:", sorted(m for m in ("sokovan.agent.daemon", "alembic", "aiodocker") if m in sys.modules))
"""


def _imported_by(*args: str) -> tuple[str, str]:
    code = PROBE.format(args=", ".join(repr(a) for a in args))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    modules, heavy = out.stdout.strip().splitlines()[-2:]
    return modules, heavy


def test_every_command_loads_under_its_name() -> None:
    for name in COMMANDS:
        assert load(name).name == name
    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(COMMANDS)
    assert cli.get_command(ctx, "no-such-command") is None


def test_a_client_command_imports_its_own_module_only() -> None:
    modules, heavy = _imported_by("session", "--help")
    assert modules == "['sokovan.cli.session_cmd']"
    assert heavy == "heavy: []"


def test_the_agent_command_still_loads_what_it_needs() -> None:
    modules, heavy = _imported_by("agent", "--help")
    assert "sokovan.cli.agent_cmd" in modules and "sokovan.cli.session_cmd" not in modules
    assert "sokovan.agent.daemon" in heavy
