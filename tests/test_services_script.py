"""`scripts/services.py up` finds the running services and writes an env file whose addresses answer."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "services.py"
KEYS = ("SOKOVAN_DB_URL", "SOKOVAN_REDIS_URL", "SOKOVAN_ETCD")
# Written too when a container engine and a registry could be had (both or neither).
CONTAINER_KEYS = ("SOKOVAN_ENGINE", "SOKOVAN_REGISTRY")


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
    assert set(values) in (set(KEYS), {*KEYS, *CONTAINER_KEYS}), values
    assert values["SOKOVAN_DB_URL"].startswith("postgresql+asyncpg://")
    assert values["SOKOVAN_REDIS_URL"].startswith(("redis://", "rediss://"))

    for key in KEYS:
        host, port = _host_port(key, values[key])
        with socket.create_connection((host, port), timeout=5):
            pass
    if "SOKOVAN_ENGINE" in values:
        _check_containers(values["SOKOVAN_ENGINE"], values["SOKOVAN_REGISTRY"])

    # It also prints the same lines on stdout, for `eval`/`export` use.
    assert [ln for ln in result.stdout.splitlines() if ln] == [f"{k}={v}" for k, v in values.items()]


def _check_containers(engine: str, registry: str) -> None:
    """The engine answers GET /_ping and the registry GET /v2/, and holds the default images."""
    parts = urllib.parse.urlsplit(engine)
    if parts.scheme == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5)
        sock.connect(parts.path)
    else:
        assert parts.scheme == "tcp" and parts.hostname and parts.port, engine
        sock = socket.create_connection((parts.hostname, parts.port), timeout=5)
    with sock:
        sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: localhost\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.") and b" 200 " in answer.split(b"\r\n")[0], answer[:80]
    assert answer.rstrip().endswith(b"OK"), answer[-80:]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{registry}/v2/", timeout=5) as resp:
        assert resp.status == 200
    accept = (
        "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
    )
    for path in ("shell/manifests/latest", "python/manifests/3"):
        req = urllib.request.Request(
            f"http://{registry}/v2/{path}", headers={"Accept": accept}, method="HEAD"
        )
        with opener.open(req, timeout=5) as resp:
            assert resp.headers["Docker-Content-Digest"].startswith("sha256:"), path
