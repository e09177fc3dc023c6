"""The engine and registry that scripts/services.py found or started, and one build into them.

The builds go to a namespace of their own in that registry (`HOST:PORT/t<run>`), so the first
build of a run really builds and pushes, whatever the registry held before; what it made is
removed from the engine and the registry afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sokovan.images.engine import connect
from tests import services

RUN = uuid.uuid4().hex[:8]
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
)
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Containers:
    engine: str
    registry: str  # HOST:PORT
    namespace: str  # HOST:PORT/t<run>, where this run's builds go


@pytest.fixture(scope="session")
def containers() -> Containers:
    engine, registry = services.service("SOKOVAN_ENGINE", ""), services.service("SOKOVAN_REGISTRY", "")
    if not engine or not registry:
        pytest.fail("no container engine: scripts/services.py up found none (make test starts one)")
    return Containers(engine, registry, f"{registry}/t{RUN}")


def sokovan(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sokovan", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if k != "DOCKER_HOST"},
    )


def registry_digest(registry: str, repository: str, tag: str) -> str | None:
    """The registry's manifest digest for a tag (its Docker-Content-Digest header); None when absent."""
    req = urllib.request.Request(
        f"http://{registry}/v2/{repository}/manifests/{tag}",
        headers={"Accept": MANIFEST_TYPES},
        method="HEAD",
    )
    try:
        with NO_PROXY.open(req, timeout=10) as resp:
            return str(resp.headers["Docker-Content-Digest"])
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


@pytest.fixture(scope="session")
def first_build(containers: Containers) -> Iterator[subprocess.CompletedProcess[str]]:
    """`sokovan images build` into this run's namespace, once per test session."""
    result = sokovan("images", "build", "--registry", containers.namespace, "--engine", containers.engine)
    yield result
    _cleanup(containers, result.stdout)


def _cleanup(containers: Containers, stdout: str) -> None:
    """Remove this run's images from the engine and (where the registry allows it) the registry."""
    refs = [line.split()[0] for line in stdout.splitlines() if line.strip()]

    async def untag() -> None:
        docker = connect(containers.engine)
        try:
            for ref in refs:
                with contextlib.suppress(Exception):  # still used by a leftover container: keep it
                    await docker.images.delete(ref)
        finally:
            await docker.close()

    asyncio.run(untag())
    for line in stdout.splitlines():
        ref, _, digest = line.partition(" ")
        path = ref.removeprefix(containers.registry + "/").rpartition(":")[0]
        req = urllib.request.Request(
            f"http://{containers.registry}/v2/{path}/manifests/{digest}", method="DELETE"
        )
        with contextlib.suppress(OSError):  # a registry without deletes enabled keeps them
            NO_PROXY.open(req, timeout=10).close()


def parse_lines(stdout: str) -> dict[str, str]:
    """`<reference> <digest>` lines as {reference: digest}."""
    out = {}
    for line in stdout.splitlines():
        ref, sep, digest = line.partition(" ")
        assert sep and digest.startswith("sha256:") and len(digest) == 71, line
        out[ref] = digest
    return out
