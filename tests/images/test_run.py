"""Containers from the images just built run as a non-root uid: `python3 --version`, `id -u`, `ps`.

Each runs from the reference pinned to the digest the build printed, pulled from the registry,
through the Engine API (aiodocker), as the agent's container backend will.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from sokovan.images.engine import connect
from tests.images.conftest import RUN, Containers, parse_lines

UID = "20001"


async def run(engine: str, image: str, cmd: list[str]) -> tuple[int, str]:
    """Create, start and wait for a container; its exit code and output. It is removed after."""
    docker = connect(engine)
    try:
        config = {
            "Image": image,
            "Cmd": cmd,
            "User": UID,
            "Labels": {"org.sokovan.test": RUN},
            "HostConfig": {"Memory": 256 * 2**20, "NetworkMode": "none"},
        }
        container = await docker.containers.create(config, name=f"sokovan-test-{uuid.uuid4().hex[:10]}")
        try:
            await container.start()
            status = await container.wait(timeout=120)
            logs = await container.log(stdout=True, stderr=True)
            return int(status["StatusCode"]), "".join(logs)
        finally:
            await container.delete(force=True)
    finally:
        await docker.close()


async def pinned(engine: str, reference: str, digest: str) -> str:
    """`name@digest`, pulled from the registry."""
    name = reference.rpartition(":")[0]
    image = f"{name}@{digest}"
    docker = connect(engine)
    try:
        await docker.images.pull(image)
    finally:
        await docker.close()
    return image


@pytest.fixture(scope="module")
def images(first_build: subprocess.CompletedProcess[str]) -> dict[str, tuple[str, str]]:
    assert first_build.returncode == 0, first_build.stderr
    out = {}
    for ref, digest in parse_lines(first_build.stdout).items():
        out[ref.rpartition("/")[2].partition(":")[0]] = (ref, digest)
    return out


async def test_python_image_runs_python3(containers: Containers, images: dict[str, tuple[str, str]]) -> None:
    image = await pinned(containers.engine, *images["python"])
    code, out = await run(containers.engine, image, ["python3", "--version"])
    assert (code, out.split()[:1]) == (0, ["Python"]), out
    script = "import os, ssl, sqlite3, json, decimal, ctypes; print(os.getuid(), os.getcwd())"
    code, out = await run(containers.engine, image, ["python", "-c", script])
    assert (code, out.split()) == (0, [UID, "/home/work"]), out
    code, out = await run(containers.engine, image, ["sh", "-c", "id -u && ps"])
    assert code == 0, out
    assert out.splitlines()[0] == UID
    assert "PID" in out.splitlines()[1]


async def test_shell_image_runs_its_tools(containers: Containers, images: dict[str, tuple[str, str]]) -> None:
    image = await pinned(containers.engine, *images["shell"])
    code, out = await run(containers.engine, image, ["id", "-u"])
    assert (code, out.strip()) == (0, UID), out
    code, out = await run(containers.engine, image, ["ps"])
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["PID", "USER", "COMMAND"], out
    assert any(ln.split()[1:2] == [UID] and "ps" in ln for ln in lines[1:]), out
    tools = (
        "for t in sh cat nc sleep ls echo env grep wc; do command -v $t >/dev/null || echo missing $t; done"
    )
    code, out = await run(
        containers.engine, image, ["sh", "-c", f"{tools}; echo hi > /home/work/f && cat /home/work/f"]
    )
    assert (code, out.strip()) == (0, "hi"), out
