"""The state file (.dev/services/state.json: the throwaway servers this script started), atomic
writes, and the lock that lets one `up`/`down` run at a time."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scripts.devservices.common import DEV_DIR, LOCK_FILE, STATE_FILE


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
