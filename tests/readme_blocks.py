"""The README's shell examples as a test runs them: every ```sh block, in order, in bash.

A block runs with `set -euo pipefail` after the README's own `source .venv/bin/activate`, with the
variables the README tells the reader to export (`SOKOVAN_API`, `SOKOVAN_TOKEN`) and what earlier
blocks exported or assigned: each block's shell variables are saved after it and restored before
the next one, as if the reader typed them into one terminal. A block preceded by the comment
`<!-- readme-test: skip REASON -->` is not run (the README says the reason in its text too); one
preceded by `<!-- readme-test: exit N -->` must end with exit status N (an example of a refusal).

Why a runner of our own: the tools that execute Markdown's code blocks (pytest-codeblocks,
pytest-markdown-docs, byexample, cram) either run Python blocks only, run each block in a fresh
shell (no variables from the blocks before), or need expected output written beside every
command; the README's examples are commands a reader types one after another into one shell.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\s*$")
SKIP = re.compile(r"<!--\s*readme-test:\s*skip\b\s*(.*?)\s*-->")
EXIT = re.compile(r"<!--\s*readme-test:\s*exit\s+(\d+)\s*-->")
SHELLS = frozenset({"sh", "bash", "shell"})
# Shell variables of bash itself, which a block's saved state must not carry into the next one.
KEEP_OUT = "PWD|OLDPWD|SHLVL|_|PS1|PS2|PS4|IFS|OPTIND|OPTERR|BASH[A-Z_]*|HISTFILE|COLUMNS|LINES"


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    code: str
    skip: str | None  # why it is not run, or None
    exit: int = 0  # the exit status it must end with


def shell_blocks(text: str) -> list[Block]:
    """The README's shell blocks, with the skip marker of each (the comment right above it)."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened or not opened.group(1):
            i += 1
            continue
        start, language = i, opened.group(1)
        i += 1
        body: list[str] = []
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append(lines[i])
            i += 1
        i += 1
        if language not in SHELLS:
            continue
        above = next((lines[j] for j in range(start - 1, max(start - 3, -1), -1) if lines[j].strip()), "")
        marker = SKIP.search(above)
        expected = EXIT.search(above)
        blocks.append(
            Block(
                start + 1,
                "\n".join(body),
                (marker.group(1) or "no reason") if marker else None,
                int(expected.group(1)) if expected else 0,
            )
        )
    return blocks


@dataclass(frozen=True)
class Outcome:
    block: Block
    code: int
    output: str


def run_block(block: Block, root: Path, env: dict[str, str], state: Path, timeout: float = 300) -> Outcome:
    """Run one block in bash from the checkout `root`, with the variables of the blocks before it."""
    script = "\n".join(
        [
            "set -euo pipefail",
            f"source {root / '.venv' / 'bin' / 'activate'}",
            f"if [ -f {state} ]; then source {state}; fi",
            f'trap \'declare -p | grep -E "^declare (-x|--) [A-Za-z_][A-Za-z0-9_]*=" '
            f'| grep -vE "^declare [-x]+ ({KEEP_OUT})=" > {state} || true\' EXIT',
            block.code,
        ]
    )
    try:
        done = subprocess.run(
            ["bash", "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        said = b"".join(x for x in (exc.stdout, exc.stderr) if isinstance(x, bytes)).decode(errors="replace")
        return Outcome(block, -1, f"{said}\n[still running after {timeout:.0f} s: stopped]")
    return Outcome(block, done.returncode, done.stdout + done.stderr)
