"""The agent's cluster secret from a file, and keeping it out of its kernels' reach.

`--secret-file PATH` (env SOKOVAN_CLUSTER_SECRET_FILE) names a file holding the secret (one line;
surrounding whitespace is stripped). The file must be a regular file that others cannot read or
write (no `o+r`, no `o+w`), and must not be empty: otherwise the agent refuses to start. Once the
secret is read, SOKOVAN_CLUSTER_SECRET is removed from the agent's own environment (`scrub`), so
no child it starts could inherit it even by mistake.

An agent that is not root runs its kernels as its own user, and a process may read
/proc/<pid>/environ and memory of a process of its user unless that process is non-dumpable:
`make_undumpable` sets PR_SET_DUMPABLE to 0 (Linux), which makes the agent's /proc files root's.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import stat
from pathlib import Path

SECRET_ENV = "SOKOVAN_CLUSTER_SECRET"
SECRET_FILE_ENV = "SOKOVAN_CLUSTER_SECRET_FILE"
PR_SET_DUMPABLE = 4
MAX_SECRET_FILE = 4096


class SecretFileError(ValueError):
    """A secret file the agent must not use; the message says why."""


def read_secret_file(path: Path) -> str:
    """The secret in `path`; SecretFileError when it is missing, unsafe or empty."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SecretFileError(f"cannot read the secret file {path}: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SecretFileError(f"the secret file {path} is not a regular file")
        if info.st_mode & (stat.S_IROTH | stat.S_IWOTH):
            raise SecretFileError(
                f"the secret file {path} is readable or writable by others (mode "
                f"{stat.S_IMODE(info.st_mode):04o}): chmod o-rw {path}"
            )
        data = os.read(fd, MAX_SECRET_FILE + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SECRET_FILE:
        raise SecretFileError(f"the secret file {path} is larger than {MAX_SECRET_FILE} bytes")
    try:
        secret = data.decode().strip()
    except UnicodeDecodeError as exc:
        raise SecretFileError(f"the secret file {path} is not UTF-8 text") from exc
    if not secret:
        raise SecretFileError(f"the secret file {path} is empty")
    return secret


def scrub() -> None:
    """Remove the secret from this process's environment."""
    os.environ.pop(SECRET_ENV, None)
    with contextlib.suppress(AttributeError, OSError):
        os.unsetenv(SECRET_ENV)


def make_undumpable() -> bool:
    """PR_SET_DUMPABLE 0 for this process; whether it took effect."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False
