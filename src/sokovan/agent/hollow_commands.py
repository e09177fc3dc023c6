"""What a hollow kernel makes of its command: how long a `sleep S` runs, whether it ignores
SIGTERM (`trap '' TERM`), and when and with which exit code it ends once sent SIGTERM."""

from __future__ import annotations

import re

EXIT_TERM = 128 + 15
EXIT_KILL = 128 + 9
_SLEEP_RE = re.compile(r"^\s*(?:exec\s+)?sleep\s+(\d+(?:\.\d*)?|\.\d+)\s*$")


def sleep_seconds(command: str | None) -> float | None:
    """S for a command `sleep S` / `exec sleep S`; None for anything else (runs until destroyed)."""
    if command is None:
        return None
    match = _SLEEP_RE.match(command)
    return float(match.group(1)) if match else None


_IGNORE_TERM_RE = re.compile(r"""\btrap\s+(?:''|"")\s+(?:[A-Za-z0-9]+\s+)*(?:SIG)?(?:TERM|15)\b""")


def ignores_term(command: str | None) -> bool:
    """Whether a command sets SIGTERM to be ignored (`trap '' TERM`, `trap "" INT TERM`, ...)."""
    return command is not None and _IGNORE_TERM_RE.search(command) is not None


def stop_after(grace: float, reaction: float | None) -> tuple[float, int]:
    """When a hollow kernel sent SIGTERM ends and with which code: after its `reaction` time
    (None: it ignores TERM) with 143, or when the `grace` ends with 137, whichever comes first."""
    if reaction is not None and reaction <= grace:
        return max(reaction, 0.0), EXIT_TERM
    return grace, EXIT_KILL
