"""The processes of the throwaway servers: free ports, live pids, starting a server and waiting
until it is ready, ending one."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from scripts.devservices.common import HOST, ServiceError, log


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def pid_alive(pid: int | None, needle: str | None = None) -> bool:
    """Whether the process runs (and its command line contains `needle`, against PID reuse)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
        if needle is not None:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            return needle in cmdline
    except (OSError, IndexError):
        pass
    return True


def wait_until(
    what: str,
    check: Callable[[], str | None],
    timeout: float,
    log_file: Path | None = None,
    alive: Callable[[], bool] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    reason = "no answer yet"
    while time.monotonic() < deadline:
        reason = check() or ""
        if not reason:
            return
        if alive is not None and not alive():
            break
        time.sleep(0.2)
    msg = f"{what} did not become ready within {timeout:.0f}s: {reason}"
    if alive is not None and not alive():
        msg = f"{what} exited during start-up (last check: {reason})"
    if log_file is not None and log_file.exists():
        tail = log_file.read_text(errors="replace").splitlines()[-15:]
        msg += f"\n  log {log_file} ends with:\n    " + "\n    ".join(tail)
    raise ServiceError(msg)


def spawn_ready(
    what: str,
    argv: list[str],
    cwd: Path,
    log_file: Path,
    check: Callable[[], str | None],
    timeout: float,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start a server in a session of its own, its output appended to `log_file`, and wait until
    `check` says it is ready; one that does not become ready is killed (ServiceError)."""
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(
            argv,
            cwd=str(cwd),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        wait_until(what, check, timeout, log_file, alive=lambda: proc.poll() is None)
    except ServiceError:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise
    return proc


def _kill(pid: int, needle: str | None, grace: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and pid_alive(pid, needle):
        time.sleep(0.1)
    if pid_alive(pid, needle):
        log(f"process {pid} ignored SIGTERM; sending SIGKILL")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
