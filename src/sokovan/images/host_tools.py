"""What the default images are built from, installed from Debian's packages when it is missing.

The builder copies busybox (`busybox-static`) and Debian's `python3` from this machine. On a
machine that lacks them, as root with apt-get, they are installed first (as `make services`
installs the engine and the registry); anywhere else the build says which package is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

from sokovan.images.contexts import BUSYBOX_CANDIDATES, PYTHON


def _has_busybox() -> bool:
    return any(os.path.isfile(p) for p in BUSYBOX_CANDIDATES) or shutil.which("busybox") is not None


PACKAGES: dict[str, Callable[[], bool]] = {"busybox-static": _has_busybox, "python3": PYTHON.is_file}


def missing() -> list[str]:
    return [name for name, present in PACKAGES.items() if not present()]


def ensure_host_tools(say: Callable[[str], None]) -> None:
    """Install the missing packages when this process may (root, apt-get); else leave it to the
    build, which names what is missing."""
    wanted = missing()
    if not wanted or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    say(f"installing {' '.join(wanted)} (the default images are built from them)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *wanted]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env, "check": False}
    if subprocess.run(install, **quiet).returncode != 0:  # type: ignore[call-overload]
        subprocess.run(["apt-get", "update"], **quiet)  # type: ignore[call-overload]
        subprocess.run(install, **quiet)  # type: ignore[call-overload]
