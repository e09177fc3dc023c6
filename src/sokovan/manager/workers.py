"""How many manager processes `sokovan manager` runs, and keeping them tied to their parent.

`--workers auto` (the default, also `SOKOVAN_MANAGER_WORKERS`) is one worker per core this process
may run on (`os.sched_getaffinity`), at most `MAX_AUTO` (4): each worker is a whole manager and the
lanes are dealt out between them, so a plain `sokovan manager` uses the machine it is given. The cap
keeps a big host within PostgreSQL's default 100 connections (each worker opens up to its pool,
10 + 10, plus its lane-lock and probe connections). A number overrides it.

A worker dies with the process that started it (`PR_SET_PDEATHSIG`, Linux): a parent killed with
SIGKILL does not leave workers serving the port (and holding lanes) without their parent's
supervision; on other systems the parent's clean stop still ends them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal

import click

MAX_AUTO = 4
PR_SET_PDEATHSIG = 1


def auto_workers() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_AUTO, cores))


class WorkersType(click.ParamType):  # type: ignore[type-arg]
    """`auto` or a whole number from 1 to 64."""

    name = "auto|N"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            number = value
        elif str(value).strip().lower() == "auto":
            return auto_workers()
        else:
            try:
                number = int(str(value))
            except ValueError:
                self.fail(f"{value!r} is neither 'auto' nor a whole number", param, ctx)
        if not 1 <= number <= 64:
            self.fail(f"{number} is not between 1 and 64", param, ctx)
        return number


def die_with_parent() -> None:
    """In a worker, before it execs: SIGTERM when the parent process dies (Linux only)."""
    name = ctypes.util.find_library("c")
    if name is None:  # pragma: no cover
        return
    libc = ctypes.CDLL(name, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
