"""One daemon of a local test cluster, started as `python -m sokovan ...` (see sokovan.harness).

A `Daemon` signals only the process it started itself, and tells a process that was stopped on
purpose (`terminate`, `kill`, `stop`) from one that exited on its own (`failure`). Its stop signal
is SIGTERM, except for an agent: an agent stopped with SIGTERM leaves its kernels running (for its
next start to take over), so `AgentProc` stops with SIGINT, which destroys them and leaves no
process behind; `AgentProc.detach()` sends SIGTERM on purpose, and `kill()` SIGKILL.
"""

from __future__ import annotations

import asyncio
import collections
import http.client
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

SOKOVAN = [sys.executable, "-m", "sokovan"]


class HarnessError(RuntimeError):
    """A local cluster could not be started, or one of its daemons exited on its own."""


_PICK = random.SystemRandom()  # not the seeded module state: two test workers must not pick alike
_GIVEN: collections.deque[int] = collections.deque(maxlen=1024)  # handed out lately, by this process


def _below_ephemeral() -> range:
    """Ports the kernel never hands out on its own: those just below its ephemeral range, split
    between pytest-xdist's workers (each its own share, so two never pick the same one)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    ports = range(max(1024, low - 12000), low) if low > 3024 else range(0)
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if ports and worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 0:
        share = len(ports) // int(count)
        first = ports.start + share * (int(worker[2:]) % int(count))
        ports = range(first, first + share)
    return ports


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, and not one this process was given lately.

    Picked at random below the ephemeral range: a port the kernel gave `bind(0)` can be taken,
    before the daemon binds it, as the local end of any outgoing connection (or a client's
    connection to itself), and tests open many; these ports only `free_port()` picks, never twice
    in a row for one process (a cluster picks all its ports before its daemons bind any) nor for
    two test workers."""
    ports = _below_ephemeral()
    for _ in range(200 if ports else 0):
        port = _PICK.choice(ports)
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.append(port)
        return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        chosen: int = s.getsockname()[1]
        _GIVEN.append(chosen)
        return chosen


AGENT_ENV_KEEP = ("PATH", "HOME", "LANG", "TZ", "TMPDIR", "VIRTUAL_ENV")
AGENT_ENV_PREFIXES = ("SOKOVAN_", "LC_", "PYTHON", "COVERAGE")
AGENT_ENV_DROP = ("SOKOVAN_DB_URL", "SOKOVAN_TOKEN", "SOKOVAN_API", "SOKOVAN_API_BIND", "SOKOVAN_PROXY_BIND")


def agent_environment(env: Mapping[str, str], secret_file: Path | None = None) -> dict[str, str]:
    """What an agent is given of `env`: the system basics and its SOKOVAN_* settings, never the
    database URL or an API token (an agent needs neither, and used to pass everything on); with
    `secret_file`, not the cluster secret either (the agent reads it from that file)."""
    drop = {*AGENT_ENV_DROP, *(["SOKOVAN_CLUSTER_SECRET"] if secret_file is not None else [])}
    return {
        key: value
        for key, value in env.items()
        if key not in drop and (key in AGENT_ENV_KEEP or key.startswith(AGENT_ENV_PREFIXES))
    }


def write_secret_file(path: Path, secret: str) -> Path:
    """`secret` in a new file only this user may read (for an agent's --secret-file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    os.chmod(path, 0o600)
    return path


def reachable(path: Path) -> Path:
    """`path` (made if missing), with every directory from it up that this user owns given the
    right for others to traverse it (not to list it): an agent running as root starts kernels
    under their sessions' uids, and they must reach their directories by absolute path (pytest's
    temporary directories are 0700)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)  # the agent refuses a group-writable one
    for directory in [path, *path.parents]:
        info = directory.stat()
        if info.st_uid == os.geteuid() and not info.st_mode & 0o001:
            directory.chmod((info.st_mode & 0o7777) | 0o011)
    return path


def _copy_lines(source: IO[bytes], log_path: Path, echo: IO[bytes]) -> None:
    """Every line of `source` appended to `log_path` and written to `echo`, until its end (a thread
    of `Daemon.start`); `echo` going away (a closed terminal) leaves the log file still written."""
    with source, open(log_path, "ab", buffering=0) as log:
        for line in iter(source.readline, b""):
            log.write(line)
            try:
                echo.write(line)
                echo.flush()
            except (OSError, ValueError):
                pass


class Daemon:
    """`sokovan <args>` with `env`, logging to `<log_dir>/<name>.log` (appended; a banner marks each
    start), or to this process's own stdout/stderr when `log_dir` is None. Restartable.

    With `echo` set (before `start`) and a `log_dir`, its output goes to both: the log file (for
    `log_tail`) and this process's stdout/stderr (copied line by line by two threads)."""

    stop_signal = signal.SIGTERM  # what `terminate` and `stop` send
    echo = False
    # Run the command inside this (e.g. `ip netns exec <name>`, which execs it in place: the pid
    # is still the daemon's own, so its signals reach it).
    wrapper: Sequence[str] = ()

    def __init__(self, name: str, args: Sequence[str], env: Mapping[str, str], log_dir: Path | None) -> None:
        self.name = name
        self.args = list(args)
        self.env = dict(env)
        self.log_path = None if log_dir is None else log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._stopped_on_purpose = False
        self._copiers: list[threading.Thread] = []

    def start(self) -> None:
        if self.running:
            raise HarnessError(f"{self.name} is already running")
        self._stopped_on_purpose = False
        command = [*self.wrapper, *SOKOVAN, *self.args]
        if self.log_path is None:
            self.proc = subprocess.Popen(command, env=self.env)
        elif self.echo:
            self._start_echoing(command)
        else:
            with open(self.log_path, "ab") as log:
                log.write(f"\n===== start #{self.starts + 1} at {time.time():.3f} =====\n".encode())
                log.flush()
                self.proc = subprocess.Popen(command, env=self.env, stdout=log, stderr=log)
        self.starts += 1

    def _start_echoing(self, command: list[str]) -> None:
        assert self.log_path is not None
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts + 1} at {time.time():.3f} =====\n".encode())
        pipe = subprocess.PIPE
        self.proc = subprocess.Popen(command, env=self.env, stdout=pipe, stderr=pipe)
        outputs = [(self.proc.stdout, sys.stdout.buffer), (self.proc.stderr, sys.stderr.buffer)]
        name = f"{self.name}-output"
        self._copiers = [
            threading.Thread(target=_copy_lines, args=(source, self.log_path, echo), name=name, daemon=True)
            for source, echo in outputs
            if source is not None
        ]
        for copier in self._copiers:
            copier.start()

    def _drain(self, timeout: float = 2.0) -> None:
        """With `echo`, once the process has exited: wait (a little) until its last lines are in
        the log file, so that `log_tail` has them."""
        for copier in list(self._copiers):
            copier.join(timeout)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def failure(self) -> str | None:
        """Why this daemon is down although nobody stopped it; None while it runs (or was stopped)."""
        if self.proc is None or self._stopped_on_purpose:
            return None
        code = self.proc.poll()
        if code is None:
            return None
        self._drain()
        where = f": {self.log_tail()}" if self.log_path is not None else " (see its messages above)"
        return f"{self.name} exited with {code}{where}"

    def terminate(self) -> None:
        """The daemon's stop signal (SIGTERM; SIGINT for an agent), if it still runs; does not wait."""
        self.send(self.stop_signal)

    def send(self, sig: signal.Signals) -> None:
        """`sig`, if it still runs, as a stop on purpose; does not wait."""
        self._stopped_on_purpose = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """Its exit code; `subprocess.TimeoutExpired` after `timeout` seconds."""
        if self.proc is None:
            raise HarnessError(f"{self.name} was never started")
        return self.proc.wait(timeout=timeout)

    def kill(self, timeout: float = 10) -> None:
        """SIGKILL: no shutdown code runs. Waits until it is gone."""
        if self.proc is None:
            raise HarnessError(f"{self.name} was never started")
        self._stopped_on_purpose = True
        self.proc.kill()
        self.proc.wait(timeout=timeout)

    def stop(self, timeout: float = 20) -> None:
        """The stop signal and wait; SIGKILL after `timeout` seconds."""
        stop_all([self], timeout)

    def log_text(self) -> str:
        return "" if self.log_path is None else self.log_path.read_text(errors="replace")

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_text()[-chars:]


def stop_all(daemons: Iterable[Daemon], timeout: float = 20) -> None:
    """Its stop signal to every daemon still running, then wait for each; SIGKILL after `timeout`
    seconds."""
    started = [d for d in daemons if d.proc is not None]
    for d in started:
        d.terminate()
    for d in started:
        try:
            d.wait(timeout)
        except subprocess.TimeoutExpired:
            d.kill()


def check_alive(daemons: Iterable[Daemon]) -> None:
    """HarnessError naming the first daemon that exited on its own."""
    for d in daemons:
        why = d.failure()
        if why is not None:
            raise HarnessError(why)


def wait_until(
    cond: Callable[[], bool],
    what: str,
    within: float,
    *,
    watch: Iterable[Daemon] = (),
    poll: float = 0.1,
    explain: Callable[[], str] | None = None,
) -> float:
    """Seconds until `cond()` holds; HarnessError when a watched daemon exits on its own first, or
    after `within` seconds (with `explain()` appended)."""
    watched = list(watch)
    began = time.monotonic()
    while not cond():
        check_alive(watched)
        if time.monotonic() - began > within:
            raise HarnessError(f"{what}: not within {within}s" + (f": {explain()}" if explain else ""))
        time.sleep(poll)
    return time.monotonic() - began


class _HttpDaemon(Daemon):
    """A daemon whose HTTP server answers `GET /healthz` at `base_url` once it is up."""

    base_url = ""

    def healthy(self) -> bool:
        """Whether /healthz answers 200 now."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/healthz", timeout=2) as resp:
                return bool(resp.status == 200)
        except (OSError, http.client.HTTPException):
            return False

    def wait_up(self, within: float = 30) -> float:
        """Seconds until /healthz answers 200; HarnessError if it exits or `within` passes first."""
        return wait_until(
            self.healthy, f"{self.name} /healthz", within, watch=[self], poll=0.05, explain=self.log_tail
        )


class ManagerProc(_HttpDaemon):
    """`sokovan manager` serving its API on `bind` (default: a free port on 127.0.0.1), restartable
    on the same port. One process (`--workers 1`) unless `args` say otherwise: a test that kills
    "the manager" kills all of it, and its logs are one process's."""

    def __init__(
        self,
        env: Mapping[str, str],
        log_dir: Path | None,
        name: str = "manager",
        *,
        bind: str | None = None,
        args: Sequence[str] = (),
    ) -> None:
        bind = bind or f"127.0.0.1:{free_port()}"
        if not any(a == "--workers" or a.startswith("--workers=") for a in args):
            args = ["--workers", "1", *args]
        super().__init__(name, ["manager", *args], {**env, "SOKOVAN_API_BIND": bind}, log_dir)
        self.port = int(bind.rpartition(":")[2])
        self.api = self.base_url = f"http://{bind}"

    async def wait_healthy(self, within: float = 30) -> float:
        """`wait_up` without blocking the event loop."""
        return await asyncio.to_thread(self.wait_up, within)


class AgentProc(Daemon):
    """`sokovan agent --id <agent_id>`: a process agent with its kernels under `work_dir`, or with
    `simulate` a hollow fleet of that many agents. `extra` arguments go last. Its environment is
    `agent_environment(env)`; with `secret_file` it reads the cluster secret from there.

    Stopped with SIGINT (its kernels are destroyed); `detach()` stops it with SIGTERM, leaving its
    kernels running for a restart (`start()` again, same id and work dir) to take over."""

    stop_signal = signal.SIGINT

    def __init__(
        self,
        env: Mapping[str, str],
        log_dir: Path | None,
        agent_id: str,
        *,
        slots: str | None = None,
        work_dir: Path | None = None,
        simulate: int | None = None,
        rpc_port: int = 0,
        extra: Iterable[str] = (),
        secret_file: Path | None = None,
    ) -> None:
        args = ["agent", "--id", agent_id, "--rpc-port", str(rpc_port)]
        if secret_file is not None:
            args += ["--secret-file", str(secret_file)]
        if slots is not None:
            args += ["--slots", slots]
        if work_dir is not None:
            args += ["--work-dir", str(reachable(work_dir))]
        if simulate is not None:
            args += ["--simulate", str(simulate)]
        elif not any(a == "--backend" or a.startswith("--backend=") for a in extra):
            args += ["--backend", "process"]  # a test that wants containers says so
        super().__init__(agent_id, [*args, *extra], agent_environment(env, secret_file), log_dir)
        self.agent_id = agent_id

    def detach(self, timeout: float = 20) -> int:
        """SIGTERM: the agent stops and leaves its kernels running. Waits; its exit code."""
        self.send(signal.SIGTERM)
        return self.wait(timeout)


class ProxyProc(_HttpDaemon):
    """`sokovan proxy` (the app proxy) on `bind` (default: a free port on 127.0.0.1)."""

    def __init__(self, env: Mapping[str, str], log_dir: Path | None, *, bind: str | None = None) -> None:
        bind = bind or f"127.0.0.1:{free_port()}"
        super().__init__("proxy", ["proxy", "--bind", bind], env, log_dir)
        self.url = self.base_url = f"http://{bind}"
