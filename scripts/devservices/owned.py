"""The servers this script started (the state file's entries): whether one still runs, stopping one."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from scripts.devservices.postgres_server import _postmaster_pid, stop_postgres
from scripts.devservices.processes import _kill, pid_alive


def owned_alive(name: str, entry: dict[str, Any]) -> bool:
    """Whether a server this script started (state entry) still runs."""
    if name == "postgres":
        pid = _postmaster_pid(Path(entry["data_dir"]))
        return pid_alive(pid, "postgres")
    return pid_alive(entry.get("pid"), entry.get("needle"))


def stop(name: str, entry: dict[str, Any]) -> None:
    if name == "postgres":
        stop_postgres(entry)
        return
    pid = entry.get("pid")
    if pid and pid_alive(pid, entry.get("needle")):
        _kill(int(pid), entry.get("needle"))
    shutil.rmtree(entry["base_dir"], ignore_errors=True)
    for extra in entry.get("extra_dirs", []):
        shutil.rmtree(extra, ignore_errors=True)
