"""Build contexts are deterministic, and the engine address resolves as the contract says.

No engine is needed here: these read the host's files and the environment only.
"""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import pytest

from sokovan.images import engine
from sokovan.images.contexts import CONTEXT_LABEL, python_context, shell_context


def _sha(f: object) -> str:
    h = hashlib.sha256()
    while chunk := f.read(1 << 20):  # type: ignore[attr-defined]
        h.update(chunk)
    return h.hexdigest()


def test_the_shell_context_is_stable_and_complete() -> None:
    a, b = shell_context(), shell_context()
    assert a.digest() == b.digest()
    with a.write_tar(a.digest()) as fa, b.write_tar(b.digest()) as fb:
        assert _sha(fa) == _sha(fb)
        fa.seek(0)
        with tarfile.open(fileobj=fa) as tar:
            members = {m.name: m for m in tar.getmembers()}
            dockerfile = tar.extractfile("Dockerfile")
            assert dockerfile is not None
            assert f'LABEL {CONTEXT_LABEL}="{a.digest()}"' in dockerfile.read().decode()
    names = list(members)
    top = [n for n in names if not n.startswith("rootfs/")]  # Dockerfile, home/work, rootfs; then the tree
    assert names == sorted(top) + sorted(n for n in names if n.startswith("rootfs/"))
    assert members["home/work"].mode == 0o777
    assert {m.mtime for m in members.values()} == {0}
    for tool in "sh ps id cat nc sleep ls echo env mkdir rm head tail wc grep yes dd kill true false".split():
        assert members[f"rootfs/bin/{tool}"].linkname == "busybox", tool
    assert members["rootfs/tmp"].mode == 0o1777
    assert members["rootfs/bin/busybox"].isfile()
    passwd = [ln.split(":") for ln in shell_context().tree.entries["etc/passwd"].data.decode().splitlines()]
    assert [(p[0], p[2], p[5]) for p in passwd] == [("root", "0", "/root"), ("work", "1000", "/home/work")]


def test_the_python_context_holds_the_interpreter_and_its_libraries() -> None:
    ctx = python_context()
    entries = ctx.tree.entries
    assert entries["usr/bin/python3"].kind == entries["usr/bin/python"].kind == "symlink"
    interpreter = Path("/usr/bin/python3").resolve()
    assert entries[str(interpreter).lstrip("/")].kind == "file"
    stdlib = f"usr/lib/{interpreter.name}"
    assert f"{stdlib}/os.py" in entries and f"{stdlib}/lib-dynload" in entries
    for skipped in ("test", "idlelib", "tkinter", "ensurepip", "__pycache__"):
        assert not any(k.startswith(f"{stdlib}/{skipped}/") for k in entries), skipped
    assert not any("/__pycache__/" in k for k in entries)
    assert any(k.endswith("/libc.so.6") for k in entries)
    assert ctx.digest() == python_context().digest()


def test_engine_url_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.1:2375")
    assert engine.engine_url("unix:///x.sock") == "unix:///x.sock"
    assert engine.engine_url(None) == "tcp://10.0.0.1:2375"
    monkeypatch.delenv("DOCKER_HOST")
    monkeypatch.setattr(engine, "PODMAN_SOCKET", tmp_path / "podman.sock")
    assert engine.engine_url(None) == "unix:///var/run/docker.sock"
    (tmp_path / "podman.sock").touch()
    assert engine.engine_url(None) == f"unix://{tmp_path}/podman.sock"


async def test_connect_speaks_tcp_as_http() -> None:
    docker = engine.connect("tcp://127.0.0.1:1")
    try:
        assert docker.docker_host == "http://127.0.0.1:1"
        with pytest.raises(engine.EngineError, match="does not answer"):
            await engine.ping(docker, "tcp://127.0.0.1:1")
    finally:
        await docker.close()
    with pytest.raises(engine.EngineError, match="neither"):
        engine.connect("ssh://somewhere")
