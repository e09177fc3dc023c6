"""Local settings: a TOML config file plus the documented `SOKOVAN_*` environment variables.

The environment variable wins over the file; the file wins over the default.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

DEFAULT_DB_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/sokovan"


class ConfigFileError(ValueError):
    """The config file is missing or is not valid TOML."""


class Settings(BaseSettings):
    """Everything a process needs to reach PostgreSQL, Redis, etcd and the API."""

    model_config = SettingsConfigDict(env_prefix="SOKOVAN_", extra="ignore")

    db_url: str = DEFAULT_DB_URL
    redis_url: str = "redis://127.0.0.1:6379/0"
    etcd: str = "127.0.0.1:2379"
    etcd_prefix: str = "sokovan"
    api: str = "http://127.0.0.1:8090"
    token: str | None = None
    api_bind: str = "127.0.0.1:8090"
    cluster_secret: str | None = None
    # Connections per manager process: up to pool + overflow. Keep (managers x workers x that)
    # under PostgreSQL's max_connections (100 by default).
    db_pool_size: int = Field(default=10, ge=1)
    db_max_overflow: int = Field(default=10, ge=0)
    # Open `GET /v2/events` streams one manager serves at most, all its workers together (429 past it).
    max_event_streams: int = Field(default=2000, ge=1)
    # Where throwaway services started by `sokovan dev` keep their files.
    dev_dir: str = Field(default=".dev")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Explicit arguments (the parsed config file) lose to the environment.
        return (env_settings, init_settings)

    @property
    def etcd_host(self) -> str:
        return self.etcd.rsplit(":", 1)[0] or "127.0.0.1"

    @property
    def etcd_port(self) -> int:
        _, _, port = self.etcd.rpartition(":")
        return int(port) if port.isdigit() else 2379

    @property
    def api_host(self) -> str:
        return self.api_bind.rsplit(":", 1)[0]

    @property
    def api_port(self) -> int:
        return int(self.api_bind.rsplit(":", 1)[1])


def read_config_file(path: str | Path | None) -> dict[str, Any]:
    """Read a TOML config file into a flat dict (sections are merged into the top level)."""
    if path is None:
        return {}
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError as exc:
        raise ConfigFileError(f"config file {p} does not exist") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"config file {p} is not valid TOML: {exc}") from exc
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update({k.replace("-", "_"): v for k, v in value.items()})
        else:
            flat[key.replace("-", "_")] = value
    return flat


def load_settings(config_file: str | Path | None = None) -> Settings:
    file_values = read_config_file(config_file)
    known = {k: v for k, v in file_values.items() if k in Settings.model_fields}
    return Settings(**known)
