"""A tree of files for an image's root filesystem, gathered from the host.

A Tree maps paths inside the image (relative, `usr/bin/python3.11`) to entries: directories,
symbolic links, and regular files whose bytes are either given or read from a host file. Host
files go in at their own path with `mirror`, which also reproduces every symbolic link met on the
way (Debian's `/lib → usr/lib`, `libz.so.1 → libz.so.1.2.13`), so that the dynamic loader finds
in the image exactly what it finds on the host. `shared_libraries` asks `ldd` what an executable
or an extension module loads.

`digest` hashes the whole tree (paths, kinds, modes, owners, link targets and file contents, in
sorted order): the same host files give the same hash on every run. `add_to_tar` writes the tree
into a tar archive under a prefix, sorted, with fixed times and owners, so the archive is as
stable as the hash.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from sokovan.images.errors import ImagesError

MTIME = 0  # every entry's modification time, so that a context's bytes depend on contents only
CHUNK = 1 << 20
MAX_LINKS = 40  # symbolic links followed through one path before giving up (a loop)


class RootfsError(ImagesError):
    """A host file the image needs is missing or cannot be read; the message says which."""


@dataclass(frozen=True)
class Entry:
    kind: Literal["dir", "file", "symlink"]
    mode: int
    uid: int = 0
    gid: int = 0
    source: Path | None = None  # a regular file's host path, or
    data: bytes = b""  # its literal contents when there is no host path
    target: str = ""  # a symbolic link's target


def _key(path: str | PurePosixPath) -> str:
    """The image path as a relative POSIX path without `.` or `..` parts."""
    parts: list[str] = []
    for part in PurePosixPath(path).parts:
        if part in ("/", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    if not parts:
        raise RootfsError(f"{path!r} names the image's root, not a path in it")
    return "/".join(parts)


class Tree:
    """The files of one image, keyed by their path inside it."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}

    def _put(self, path: str | PurePosixPath, entry: Entry) -> None:
        key = _key(path)
        parent = key.rpartition("/")[0]
        if parent and self.entries.get(parent, Entry("dir", 0o755)).kind != "dir":
            raise RootfsError(f"/{parent} is a {self.entries[parent].kind} in the image, not a directory")
        if parent and parent not in self.entries:
            self._put(parent, Entry("dir", 0o755))
        old = self.entries.get(key)
        if old is not None and old.kind != entry.kind:
            raise RootfsError(f"/{key} would be both a {old.kind} and a {entry.kind} in the image")
        self.entries[key] = entry

    def dir(self, path: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> None:
        self._put(path, Entry("dir", mode, uid, gid))

    def file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._put(path, Entry("file", mode, data=data))

    def symlink(self, path: str, target: str) -> None:
        self._put(path, Entry("symlink", 0o777, target=target))

    def host_file(self, path: str, source: Path) -> None:
        """The regular host file `source` at `path` in the image, with its permission bits."""
        try:
            mode = source.stat().st_mode & 0o7777
        except OSError as exc:
            raise RootfsError(f"cannot read {source}: {exc.strerror or exc}") from exc
        self._put(path, Entry("file", mode, source=source))

    def mirror(self, host_path: str | os.PathLike[str], _depth: int = 0) -> None:
        """The host path at the same path in the image, with the symbolic links on the way."""
        if _depth > MAX_LINKS:
            raise RootfsError(f"too many levels of symbolic links under {host_path}")
        path = PurePosixPath("/" + _key(os.fspath(host_path)))
        current = PurePosixPath("/")
        for i, part in enumerate(path.parts[1:], start=1):
            current = current / part
            if os.path.islink(current):
                target = os.readlink(current)
                self.symlink(str(current), target)
                rest = path.parts[i + 1 :]
                resolved = PurePosixPath("/" + _key(current.parent / target), *rest)
                if os.path.lexists(resolved):
                    self.mirror(resolved, _depth + 1)
                return
        host = Path(path)
        if host.is_dir():
            self.dir(str(path), host.stat().st_mode & 0o7777)
        elif host.is_file():
            self.host_file(str(path), host)
        else:
            raise RootfsError(f"{host} is missing or is neither a file nor a directory")

    def digest(self) -> str:
        """sha256 over the whole tree, in sorted order."""
        h = hashlib.sha256()
        for key in sorted(self.entries):
            e = self.entries[key]
            h.update(f"{key}\0{e.kind}\0{e.mode:o}\0{e.uid}\0{e.gid}\0{e.target}\0".encode())
            if e.kind == "file":
                h.update(_file_hash(e).encode() + b"\n")
        return h.hexdigest()

    def add_to_tar(self, tar: tarfile.TarFile, prefix: str) -> None:
        """Every entry into `tar` under `prefix/` (or at the top for ""), sorted, fixed times and owners."""
        for key in sorted(self.entries):
            e = self.entries[key]
            info = tarfile.TarInfo(f"{prefix}/{key}" if prefix else key)
            info.mode, info.uid, info.gid, info.mtime = e.mode, e.uid, e.gid, MTIME
            if e.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif e.kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, e.target
                tar.addfile(info)
            elif e.source is not None:
                with _open(e.source) as f:
                    info.size = os.fstat(f.fileno()).st_size
                    tar.addfile(info, f)
            else:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))


def _open(source: Path) -> io.BufferedReader:
    try:
        return open(source, "rb")  # the caller closes it (with)
    except OSError as exc:
        raise RootfsError(f"cannot read {source}: {exc.strerror or exc}") from exc


def _file_hash(e: Entry) -> str:
    if e.source is None:
        return hashlib.sha256(e.data).hexdigest()
    h = hashlib.sha256()
    with _open(e.source) as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def shared_libraries(paths: list[Path]) -> list[str]:
    """The host paths of the shared libraries (and the loader) that `paths` load, as `ldd` lists them.

    A static executable has none; a library `ldd` cannot find is left out (the module that needs
    it does not load on the host either).
    """
    if not paths:
        return []
    try:
        res = subprocess.run(
            ["ldd", *map(str, paths)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env={**os.environ, "LC_ALL": "C"},
            check=False,
        )
    except OSError as exc:
        raise RootfsError(f"cannot run ldd (Debian: apt-get install libc-bin): {exc}") from exc
    found: set[str] = set()
    for line in res.stdout.splitlines():
        if not line.startswith(("\t", " ")):
            continue  # "path:" headers when several files are asked about
        words = line.split()
        if "=>" in words:
            words = words[words.index("=>") + 1 :]
        if words and words[0].startswith("/"):
            found.add(words[0])
    return sorted(found)
