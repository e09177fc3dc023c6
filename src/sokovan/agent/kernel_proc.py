"""A kernel's OS processes: starting one under the exit-code wrapper, telling whether a recorded pid
is still that kernel, and waiting for its end whether or not this agent is its parent.

A kernel is `python -I -S kernel_wrapper.py` running `/bin/sh -c <command>` (the launch document,
`launch_document`, goes to the wrapper on stdin, so neither the session's variables nor its
command are in any process's argv or in the wrapper's own environment), started as the
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
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sokovan.agent import kernel_wrapper
from sokovan.agent.log_tail import open_own_file

IDLE_COMMAND = "exec sleep 2147483647"
EXIT_FILE = "exit-code"
STDOUT, STDERR = "stdout.log", "stderr.log"
DEFAULT_MAX_LOG_BYTES = 16 * 2**20
POLL_INTERVAL = 0.2  # without pidfds: how often a kernel's liveness is checked
WRAPPER = Path(kernel_wrapper.__file__).resolve()
WRAPPER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # the wrapper's own, never the session's


@dataclass(frozen=True)
class Launch:
    """How the wrapper runs the program: as whom and with which bounds (all optional)."""

    uid: int | None = None  # None: as the wrapper's own user
    rlimits: Mapping[str, int] = field(default_factory=dict)
    cgroup: str | None = None
    umask: int | None = None
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES


def wrapper_argv() -> list[str]:
    return [sys.executable, "-I", "-S", str(WRAPPER)]


def launch_document(command: str | None, directory: Path, env: Mapping[str, str], launch: Launch) -> bytes:
    """What the wrapper reads on stdin: `/bin/sh -c <command>` (or the idle command) and its bounds."""
    document: dict[str, Any] = {
        "argv": ["/bin/sh", "-c", command if command is not None else IDLE_COMMAND],
        "env": dict(env),
        "cwd": str(directory),
        "exit_file": str(directory / EXIT_FILE),
        "stdout": str(directory / STDOUT),
        "stderr": str(directory / STDERR),
        "max_log_bytes": launch.max_log_bytes,
        "rlimits": dict(launch.rlimits),
    }
    if launch.uid is not None:
        document["uid"] = launch.uid
    if launch.umask is not None:
        document["umask"] = launch.umask
    if launch.cgroup is not None:
        document["cgroup"] = launch.cgroup
    return json.dumps(document).encode()


def spawn(
    command: str | None, directory: Path, env: Mapping[str, str], launch: Launch | None = None
) -> subprocess.Popen[bytes]:
    """Start a kernel in `directory` (a session of its own), output to its log files there.

    A stale exit-code file (of an earlier kernel with the same id) is removed first."""
    (directory / EXIT_FILE).unlink(missing_ok=True)
    document = launch_document(command, directory, env, launch or Launch())
    proc = subprocess.Popen(
        wrapper_argv(),
        cwd=directory,
        env=WRAPPER_ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    stdin = proc.stdin
    assert stdin is not None
    try:
        with stdin:
            stdin.write(document)
    except OSError:
        proc.kill()
        proc.wait()
        raise
    return proc


def read_exit_code(directory: Path) -> int | None:
    """The code the wrapper recorded in `directory`, or None when it wrote none. Only a regular
    file of the agent's own user counts: a kernel cannot forge its code with a file of its own."""
    fd = open_own_file(directory / EXIT_FILE)
    if fd is None:
        return None
    try:
        return int(os.read(fd, 32).decode().strip())
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


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
