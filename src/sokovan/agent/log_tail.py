"""Bounded, link-safe reads of what a kernel's wrapper wrote: the tail of a log, the exit code.

A kernel's directory belongs to the session's uid, which may replace any file in it with a
symbolic link (to /etc/shadow, say) or a FIFO. So the agent opens these files without following
links and without blocking, and uses only a regular file owned by its own user (the wrapper, which
runs as the agent's user, wrote it): a kernel can delete its own log, never make the agent read
something else. A read never takes more than `limit` bytes, seeking from the end, whatever the
size of the file; a log rotated by the wrapper (`<name>.1`, see `kernel_wrapper.CappedLog`) makes
up the start of the tail when the current file is shorter than the limit.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

LOG_TAIL_BYTES = 64 * 1024


def open_own_file(path: Path) -> int | None:
    """A read-only descriptor of `path` when it is a regular file of this process's user, never
    through a link; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        return None
    return fd


def read_end(path: Path, limit: int) -> bytes:
    """At most the last `limit` bytes of `path` (b"" when it is not a file the agent may trust)."""
    fd = open_own_file(path)
    if fd is None or limit <= 0:
        if fd is not None:
            os.close(fd)
        return b""
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - limit), os.SEEK_SET)
        return os.read(fd, limit)
    except OSError:
        return b""
    finally:
        os.close(fd)


def tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    """The last `limit` bytes of a log, across its rotation, decoded (bad bytes replaced)."""
    current = read_end(path, limit)
    older = read_end(path.with_name(f"{path.name}.1"), limit - len(current))
    return (older + current).decode("utf-8", errors="replace")


def note_in_log(path: Path, why: str) -> None:
    """Append the agent's reason for ending a kernel to its log at `path` (never through a link,
    only to a file the agent's own user owns)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    with contextlib.suppress(OSError):
        fd = os.open(path, flags)
        try:
            if os.fstat(fd).st_uid == os.geteuid():
                os.write(fd, f"\n[sokovan agent] kernel ended: {why}\n".encode())
        finally:
            os.close(fd)
