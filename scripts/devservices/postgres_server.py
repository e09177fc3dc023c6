"""A throwaway PostgreSQL under .dev/services/ (or /tmp when the postgres user cannot reach it):
finding its binaries, starting it (as the postgres user when root), stopping it."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from scripts.devservices.checks import pg_check
from scripts.devservices.common import DEV_DIR, HOST, ROOT, ServiceError, log
from scripts.devservices.processes import _kill, free_port, pid_alive, wait_until


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
