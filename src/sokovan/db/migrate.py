"""Run Alembic migrations from any working directory."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

import sokovan

# src/sokovan/__init__.py → the project root holds alembic.ini and migrations/.
PROJECT_ROOT = Path(sokovan.__file__).resolve().parents[2]


def alembic_config(db_url: str) -> Config:
    ini = PROJECT_ROOT / "alembic.ini"
    if not ini.exists():
        raise FileNotFoundError(f"alembic.ini not found at {ini}: install sokovan from its source tree")
    cfg = Config(str(ini))
    cfg.set_main_option("script_location", str(PROJECT_ROOT / "migrations"))
    cfg.attributes["db_url"] = db_url
    return cfg


def upgrade(db_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(db_url), revision)


def downgrade(db_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(db_url), revision)
