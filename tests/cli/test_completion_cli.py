"""`sokovan completion bash|zsh|fish` and click's completion of the command tree, run as the real
console script."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.cli.conftest import SOKOVAN


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SOKOVAN, *args], env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_naming_the_complete_var(shell: str) -> None:
    done = _run("completion", shell)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert "_SOKOVAN_COMPLETE" in done.stdout


def test_unknown_shell_is_refused() -> None:
    done = _run("completion", "tcsh")
    assert done.returncode == 2
    assert "tcsh" in done.stderr


def _complete(words: str, cword: int) -> list[str]:
    """What bash completion would offer for `words` (the script's own protocol: type,value lines)."""
    done = _run(env={"COMP_WORDS": words, "COMP_CWORD": str(cword), "_SOKOVAN_COMPLETE": "bash_complete"})
    assert done.returncode == 0, done.stderr
    return [line.partition(",")[2] for line in done.stdout.splitlines()]


def test_completion_lists_the_subcommands() -> None:
    offered = _complete("sokovan ", 1)
    assert {"session", "node", "deployment", "manager", "agent", "completion"} <= set(offered)


def test_completion_lists_a_groups_subcommands() -> None:
    offered = _complete("sokovan session ", 2)
    assert {"create", "info", "list", "watch", "terminate"} <= set(offered)
    assert _complete("sokovan session cr", 2) == ["create"]
