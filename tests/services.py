"""Where the test services are: environment variables first, then the file `make services`
writes (.env.services), then the standard local ports."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV_FILE = ROOT / ".env.services"


def _from_file() -> dict[str, str]:
    values: dict[str, str] = {}
    if ENV_FILE.exists():
        for line in ENV_FILE.read_text().splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and not key.startswith("#"):
                values[key.strip()] = value.strip()
    return values


def service(name: str, default: str) -> str:
    return os.environ.get(name) or _from_file().get(name) or default


def admin_db_url() -> str:
    """A URL of the server's maintenance database, used to create per-run test databases."""
    url = service("SOKOVAN_DB_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres")
    base, _, _ = url.rpartition("/")
    return f"{base}/postgres"


def redis_url() -> str:
    return service("SOKOVAN_REDIS_URL", "redis://127.0.0.1:6379/0")


def etcd_addr() -> str:
    return service("SOKOVAN_ETCD", "127.0.0.1:2379")
