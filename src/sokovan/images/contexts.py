"""The build contexts of the default images: `shell` and `python`.

Both are `FROM scratch` images whose context holds a `rootfs/` tree copied to `/`, a
`home/work/` directory copied to `/home/work` (owned by the `work` user, uid 1000, and writable by any uid,
since a kernel runs as a uid of its agent's range), and a Dockerfile. The
shell image is busybox with a symbolic link per tool; the python image is the host's Debian
`python3` (the interpreter, its standard library without the tests, IDLE, Tk and ensurepip, its
extension modules and every shared library those load) with the same busybox shell and tools.

A context's hash covers its tree and its Dockerfile; the Dockerfile then ends with a
`LABEL org.sokovan.context=<hash>` line, which is how a later run tells, from the registry alone,
that the image there was built from the same files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sokovan.images.rootfs import RootfsError, Tree, shared_libraries

CONTEXT_LABEL = "org.sokovan.context"
FORMAT = "1"  # bump when the way contexts are made changes without their files changing
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BUSYBOX_CANDIDATES = ("/usr/bin/busybox", "/bin/busybox", "/usr/sbin/busybox")
APPLETS = (
    "[ ash awk basename cat chmod cp cut date dd df dirname du echo env expr false find grep head "
    "hostname id kill killall ln ls mkdir mktemp mv nc nproc od pidof printf ps pwd readlink "
    "realpath rm rmdir sed seq sh sha256sum sleep sort stat tail tar tee test timeout top touch tr "
    "true uname uniq wc which whoami xargs yes"
).split()
PYTHON = Path("/usr/bin/python3")
STDLIB_SKIP = {"test", "idlelib", "tkinter", "ensurepip", "__pycache__"}
PASSWD = "root:x:0:0:root:/root:/bin/sh\nwork:x:1000:1000:work:/home/work:/bin/sh\n"
GROUP = "root:x:0:\nwork:x:1000:\n"


@dataclass(frozen=True)
class Context:
    """One image to build: where it goes, its files and its Dockerfile (without the label)."""

    repository: str  # `shell`, `python`
    tag: str
    tree: Tree
    dockerfile: str

    def digest(self) -> str:
        """The label value: sha256 of the Dockerfile and the tree."""
        parts = (FORMAT, self.dockerfile, _top().digest(), self.tree.digest())
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def full_dockerfile(self, digest: str) -> str:
        return f'{self.dockerfile}LABEL {CONTEXT_LABEL}="{digest}"\n'

    def write_tar(self, digest: str) -> IO[bytes]:
        """The context as an uncompressed tar in a temporary file, positioned at its start."""
        out = tempfile.TemporaryFile()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            top = _top()
            top.file("Dockerfile", self.full_dockerfile(digest).encode())
            top.add_to_tar(tar, "")
            self.tree.add_to_tar(tar, "rootfs")
        out.seek(0)
        return out


def _top() -> Tree:
    """The context's directories besides the Dockerfile: `rootfs/` and `home/work/`.

    `home/` is copied apart, to be owned by `work`: COPY copies a directory's contents, so the
    mode of `work` itself (writable by any uid) survives only as an entry of the copied `home/`.
    """
    top = Tree()
    top.dir("rootfs")
    top.dir("home/work", 0o777, uid=1000, gid=1000)  # any kernel uid may write there
    return top


def _dockerfile(cmd: str, env: dict[str, str]) -> str:
    lines = [
        "FROM scratch",
        "COPY rootfs/ /",
        "COPY --chown=1000:1000 home/ /home/",
        *(f"ENV {k}={v}" for k, v in env.items()),
        "WORKDIR /home/work",
        f"CMD {cmd}",
    ]
    return "\n".join(lines) + "\n"


def find_busybox() -> Path:
    for c in BUSYBOX_CANDIDATES:
        if Path(c).is_file():
            return Path(c)
    found = shutil.which("busybox")
    if found:
        return Path(found)
    raise RootfsError("busybox is not installed (Debian: apt-get install busybox-static)")


def base_tree() -> Tree:
    """busybox as /bin/busybox with its tools, /etc/passwd and /etc/group, /tmp, /root, /home."""
    tree = Tree()
    busybox = find_busybox()
    tree.host_file("bin/busybox", busybox)
    for lib in shared_libraries([busybox]):  # none for busybox-static
        tree.mirror(lib)
    for applet in APPLETS:
        tree.symlink(f"bin/{applet}", "busybox")
    tree.file("etc/passwd", PASSWD.encode())
    tree.file("etc/group", GROUP.encode())
    tree.dir("tmp", 0o1777)
    tree.dir("root", 0o700)
    tree.dir("home", 0o755)
    return tree


def shell_context() -> Context:
    env = {"PATH": PATH, "HOME": "/home/work"}
    return Context("shell", "latest", base_tree(), _dockerfile('["/bin/sh"]', env))


def host_python() -> tuple[Path, Path]:
    """The host's python3 interpreter (its real file) and its standard library directory."""
    if not PYTHON.exists():
        raise RootfsError(f"{PYTHON} is not installed (Debian: apt-get install python3)")
    interpreter = PYTHON.resolve()
    stdlib = Path("/usr/lib") / interpreter.name  # python3.11 → /usr/lib/python3.11
    if not (stdlib / "os.py").is_file():
        raise RootfsError(f"no standard library for {interpreter} at {stdlib}")
    return interpreter, stdlib


def _skip(stdlib: Path, path: Path) -> bool:
    rel = path.relative_to(stdlib).parts
    if rel and (rel[0] in STDLIB_SKIP or rel[0].startswith("config-")):
        return True  # config-*: the static library and Makefile for building extensions
    return "__pycache__" in rel


def python_context() -> Context:
    interpreter, stdlib = host_python()
    tree = base_tree()
    tree.mirror(interpreter)
    tree.mirror(stdlib)
    modules: list[Path] = []
    for top, dirnames, filenames in os.walk(stdlib):  # top-down, not following links
        dirpath = Path(top)
        dirnames[:] = sorted(d for d in dirnames if not _skip(stdlib, dirpath / d))
        for d in dirnames:
            tree.mirror(dirpath / d)
        for name in sorted(filenames):
            path = dirpath / name
            tree.mirror(path)
            if name.endswith(".so") and not path.is_symlink():
                modules.append(path)
    for lib in shared_libraries([interpreter, *modules]):
        tree.mirror(lib)
    target = interpreter.name if interpreter.parent == Path("/usr/bin") else str(interpreter)
    for name in ("python3", "python"):
        if f"usr/bin/{name}" not in tree.entries:
            tree.symlink(f"usr/bin/{name}", target)
    env = {"PATH": PATH, "HOME": "/home/work", "LANG": "C.UTF-8"}
    return Context("python", "3", tree, _dockerfile(f'["/usr/bin/{interpreter.name}"]', env))
