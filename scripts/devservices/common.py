"""What every part of scripts/services.py shares: the repository's paths, the services' standard
addresses and variables, ServiceError and log()."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
