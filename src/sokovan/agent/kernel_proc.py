"""A kernel's OS processes: starting one under the exit-code wrapper, telling whether a recorded pid
is still that kernel, and waiting for its end whether or not this agent is its parent.

A kernel is `python -I -S kernel_wrapper.py <dir>/exit-code -- /bin/sh -c <command>`, started as the
leader of a new session, so its pid is also its process group (what `killpg` stops). The pid's
start time (field 22 of /proc/<pid>/stat) is recorded with it: after an agent restart a pid whose
start time differs is another process that reused the number, never the kernel.

Waiting uses a pidfd (`os.pidfd_open` + `loop.add_reader`), which works for any process, so a kernel
started by a previous run of the agent is watched like one this run started; without pidfds it
polls. The agent's own children are reaped with `Popen.poll()` (their status is known even if the
wrapper was SIGKILLed); for the others the exit-code file is all there is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from sokovan.agent import kernel_wrapper

IDLE_COMMAND = "exec sleep 2147483647"
EXIT_FILE = "exit-code"
POLL_INTERVAL = 0.2  # without pidfds: how often a kernel's liveness is checked
WRAPPER = Path(kernel_wrapper.__file__).resolve()


def wrapper_argv(command: str | None, exit_file: Path) -> list[str]:
    """The argv that runs `/bin/sh -c <command>` (or the idle command) under the wrapper."""
    shell = ["/bin/sh", "-c", command if command is not None else IDLE_COMMAND]
    return [sys.executable, "-I", "-S", str(WRAPPER), str(exit_file), "--", *shell]


def spawn(command: str | None, directory: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a kernel in `directory` (a session of its own), output to its log files there.

    A stale exit-code file (of an earlier kernel with the same id) is removed first."""
    exit_file = directory / EXIT_FILE
    exit_file.unlink(missing_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    out = os.open(directory / "stdout.log", flags, 0o644)
    try:
        err = os.open(directory / "stderr.log", flags, 0o644)
        try:
            return subprocess.Popen(
                wrapper_argv(command, exit_file),
                cwd=directory,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        finally:
            os.close(err)
    finally:
        os.close(out)


def read_exit_code(directory: Path) -> int | None:
    """The code the wrapper recorded in `directory`, or None when it wrote none."""
    try:
        return int((directory / EXIT_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on; the command name may hold spaces and parens."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    _, sep, rest = text.rpartition(")")
    return rest.split() if sep else None


def start_time(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot), or None when there is no such process."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def alive(pid: int, started: int | None) -> bool:
    """Whether `pid` is still the process that started at `started`, and not a zombie."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X", "x"):
        return False
    return started is None or fields[19] == str(started)


def killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def wait_ended(pid: int, started: int | None, proc: subprocess.Popen[bytes] | None) -> int | None:
    """Wait until the kernel `pid` is gone; its return code when `proc` (this agent's child) is
    given, else None."""
    fd = _pidfd(pid)
    try:
        # A pidfd opened after the number was reused watches the wrong process: check again.
        if fd is not None and _running(pid, started, proc):
            await _readable(fd)
        # Without a pidfd (or after a spurious wake-up) nothing signals the end: poll for it.
        while _running(pid, started, proc):  # noqa: ASYNC110
            await asyncio.sleep(POLL_INTERVAL)
    finally:
        if fd is not None:
            os.close(fd)
    if proc is None:
        return None
    return proc.wait()  # it has ended: this only reaps it


def _running(pid: int, started: int | None, proc: subprocess.Popen[bytes] | None) -> bool:
    if proc is not None:
        return proc.poll() is None
    return alive(pid, started)


def _pidfd(pid: int) -> int | None:
    """A pidfd of `pid`; None when pidfds are unsupported or the process is gone."""
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


async def _readable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
