"""The agent's periodic care of its disk: how big a kernel's directory is (for the work-dir cap),
and which ended kernels' directories are past their retention.

A directory's size is the sum of the sizes of the files under it, symbolic links not followed,
counted only until it passes the cap (a kernel with a million small files costs one bounded walk,
not more). An ended kernel's directory has its modification time set when the kernel ends
(`Isolation.ended`), so its age is the time since the end; one that no live kernel owns and that
is older than the retention is removed whole (`remove_tree`: `shutil.rmtree`, which does not
follow links out of the tree). Only directories named like kernel ids are considered; the state
file and anything else in the work dir are left alone.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Collection
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


def dir_size(directory: Path, stop_at: int) -> int:
    """Bytes in the files under `directory`, counted until the sum passes `stop_at`."""
    total = 0
    pending = [directory]
    while pending and total <= stop_at:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(Path(entry.path))
                    else:
                        total += info.st_size
        except OSError:
            continue
    return total


def expired_kernel_dirs(
    work_dir: Path, live: Collection[str], keep: float, now: float, is_kernel_id: Callable[[str], bool]
) -> list[Path]:
    """Directories of `work_dir` named like kernels, not live, last modified over `keep` s ago."""
    expired = []
    try:
        entries = list(os.scandir(work_dir))
    except OSError:
        return []
    for entry in entries:
        if entry.name in live or not is_kernel_id(entry.name):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and now - info.st_mtime > keep:
            expired.append(Path(entry.path))
    return expired


def remove_tree(directory: Path) -> None:
    """Remove `directory` and everything in it; what cannot be removed is logged."""

    def report(
        function: object, path: str, exc_info: tuple[type[BaseException], BaseException, object]
    ) -> None:
        log.warning("kernel.directory_not_removed", path=path, error=str(exc_info[1]))

    shutil.rmtree(directory, onerror=report)
