"""`scripts/services.py up` finds the running services and writes an env file whose addresses answer."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "services.py"
KEYS = ("SOKOVAN_DB_URL", "SOKOVAN_REDIS_URL", "SOKOVAN_ETCD")


def _host_port(key: str, value: str) -> tuple[str, int]:
    if key == "SOKOVAN_ETCD":
        host, _, port = value.rpartition(":")
        return host, int(port)
    parts = urllib.parse.urlsplit(value)
    assert parts.hostname and parts.port, f"{key}={value} has no host:port"
    return parts.hostname, parts.port


def test_up_writes_env_file_whose_services_answer(tmp_path: Path) -> None:
    env_file = tmp_path / "env.services"
    # --no-start: the services must already be up (make services / the machine's own servers);
    # this test never starts one itself, which keeps it fast.
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "up", "--no-start", "--timeout", "10", "--env-file", str(env_file)],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr

    values = {}
    for line in env_file.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            values[key] = value
    assert set(values) == set(KEYS), values
    assert values["SOKOVAN_DB_URL"].startswith("postgresql+asyncpg://")
    assert values["SOKOVAN_REDIS_URL"].startswith(("redis://", "rediss://"))

    for key in KEYS:
        host, port = _host_port(key, values[key])
        with socket.create_connection((host, port), timeout=5):
            pass

    # It also prints the same lines on stdout, for `eval`/`export` use.
    assert [ln for ln in result.stdout.splitlines() if ln] == [f"{k}={values[k]}" for k in KEYS]
