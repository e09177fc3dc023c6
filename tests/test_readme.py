"""The README's examples work as pasted: every shell block of README.md, in order, against a
cluster started as `make dev` starts it (`sokovan dev`, on its own database), after the
README's own `source .venv/bin/activate` and export line (tests/readme_blocks.py).

`sokovan dev` listens where the README says (API 127.0.0.1:8090, proxy :8091), so this test needs
those ports free: stop a running `make dev` first. Its state goes to the database
`sokovan_readme` (SOKOVAN_DEV_DATABASE) and the etcd and Redis prefix `sokovan-readme`, started
afresh, so a developer's `make dev` database and settings are left alone (the dev agents' work
directories under .dev/ are shared, and `--fresh` empties them).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.readme_blocks import Block, Outcome, run_block, shell_blocks

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXPORT = re.compile(r"export SOKOVAN_API=(\S+) SOKOVAN_TOKEN=(\S+)")
# What a reader should never see in the examples' output: Python's reprs of enums, a bare `None`,
# memory as a byte count (the CLI prints binary units; JSON from curl keeps bytes as strings).
UNREADABLE = re.compile(r"<[A-Z][A-Za-z]+\.[A-Z_]+: |\bNone\b|\bmem=\d{6,}\b")
START_TIMEOUT = 240.0


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


class DevStack:
    """`sokovan dev --fresh` in the background, and what its banner said."""

    def __init__(self, env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "sokovan"), "dev", "--fresh"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def banner(self) -> tuple[str, str]:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            for line in self.lines:
                found = EXPORT.search(line)
                if found:
                    return found.group(1), found.group(2)
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        raise AssertionError("sokovan dev did not print its banner:\n" + "\n".join(self.lines[-40:]))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def dev_env() -> Iterator[dict[str, str]]:
    for port in (8090, 8091):
        if not _port_free(port):
            pytest.fail(f"port {port} is taken (a `make dev` running?): the README's addresses need it")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOKOVAN_")}
    env["SOKOVAN_DEV_DATABASE"] = "sokovan_readme"
    env["SOKOVAN_ETCD_PREFIX"] = "sokovan-readme"  # its settings and bus keys apart from `make dev`'s
    stack = DevStack(env)
    try:
        api, token = stack.banner()
        yield {**env, "SOKOVAN_API": api, "SOKOVAN_TOKEN": token}
    finally:
        stack.stop()


def _describe(outcome: Outcome) -> str:
    return (
        f"README.md line {outcome.block.line}: the block ended with exit status {outcome.code}, "
        f"not {outcome.block.exit}\n--- block ---\n{outcome.block.code}\n"
        f"--- output ---\n{outcome.output[-4000:]}"
    )


def test_every_readme_example_works_as_pasted(dev_env: dict[str, str], tmp_path: Path) -> None:
    blocks = shell_blocks(README.read_text())
    assert len([b for b in blocks if b.skip is None]) >= 8, "the README lost its examples"
    state = tmp_path / "shell-state"
    for block in blocks:
        if block.skip is not None:
            continue
        outcome = run_block(block, ROOT, dev_env, state)
        assert outcome.code == block.exit, _describe(outcome)
        assert "Traceback" not in outcome.output, _describe(outcome)
        unreadable = UNREADABLE.search(outcome.output)
        assert unreadable is None, f"unreadable {unreadable.group(0)!r}: " + _describe(outcome)


def test_the_runner_fails_on_a_broken_command(tmp_path: Path) -> None:
    """A README whose command breaks fails the test: the runner is shown one on purpose."""
    text = "\n".join(
        [
            "```sh",
            "name=first",
            "```",
            "<!-- readme-test: exit 1 -->",
            "```sh",
            "false",
            "```",
            "```sh",
            'test "$name" = first      # a variable of an earlier block',
            "sokovan no-such-command",
            "```",
        ]
    )
    env = {**os.environ}
    state = tmp_path / "state"
    outcomes = [run_block(b, ROOT, env, state) for b in shell_blocks(text)]
    assert [o.code == o.block.exit for o in outcomes] == [True, True, False]
    assert "No such command" in outcomes[2].output


def test_skipped_blocks_say_why() -> None:
    blocks: list[Block] = shell_blocks(README.read_text())
    for block in blocks:
        assert block.skip is None or len(block.skip) > 10, f"line {block.line}: say why it is not run"
