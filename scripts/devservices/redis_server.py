"""A throwaway Redis under .dev/services/: finding redis-server (installing it as root), starting it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from scripts.devservices.checks import redis_check
from scripts.devservices.common import DEV_DIR, HOST, ServiceError, log
from scripts.devservices.processes import _kill, free_port, pid_alive, wait_until


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
