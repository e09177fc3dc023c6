"""The bounds every session (and deployment) request must keep, as pure checks.

What one request may carry is bounded so that it cannot hurt others: a session's `environ` and
`command` travel in the batched RPC calls to an agent together with other sessions' kernels, so
their size is capped; names of environment variables must be ones a shell can export. Each check
raises ValueError, which pydantic turns into a 422 field error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_ENVIRON_NAMES = 128
MAX_ENVIRON_BYTES = 64 * 1024  # names and values together, UTF-8
MAX_COMMAND_BYTES = 64 * 1024
ENVIRON_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_PRIORITY = 10
MAX_PRIORITY = 100


def check_environ(environ: Mapping[str, str]) -> None:
    """At most `MAX_ENVIRON_NAMES` names, each `[A-Za-z_][A-Za-z0-9_]*`, at most
    `MAX_ENVIRON_BYTES` in all."""
    if len(environ) > MAX_ENVIRON_NAMES:
        raise ValueError(f"at most {MAX_ENVIRON_NAMES} variables, got {len(environ)}")
    bad = [name for name in environ if not ENVIRON_NAME.fullmatch(name)]
    if bad:
        shown = ", ".join(repr(name[:64]) for name in bad[:5])
        raise ValueError(f"variable names must match [A-Za-z_][A-Za-z0-9_]*: {shown}")
    size = sum(len(k.encode()) + len(v.encode()) for k, v in environ.items())
    if size > MAX_ENVIRON_BYTES:
        raise ValueError(f"names and values may take at most {MAX_ENVIRON_BYTES} bytes in all, got {size}")


def check_command(command: str | None) -> None:
    """At most `MAX_COMMAND_BYTES` bytes of UTF-8."""
    if command is not None and len(command.encode()) > MAX_COMMAND_BYTES:
        raise ValueError(f"at most {MAX_COMMAND_BYTES} bytes, got {len(command.encode())}")


def priority_refusal(priority: int, is_admin: bool) -> str | None:
    """Why a caller may not ask for `priority`, or None: above the default is for admins only."""
    if priority > DEFAULT_PRIORITY and not is_admin:
        return (
            f"priority {priority} is above the default {DEFAULT_PRIORITY}: only admins may raise "
            f"a session's priority (users may ask for 0-{DEFAULT_PRIORITY})"
        )
    return None


def cluster_size_refusal(cluster_size: int, largest_group: int) -> str | None:
    """Why `cluster_size` kernels are too many, or None: no more than the largest scaling group has
    agents (of any status)."""
    if cluster_size > max(largest_group, 1):
        return (
            f"cluster_size {cluster_size} is more than the largest scaling group's agent count "
            f"({largest_group})"
        )
    return None
