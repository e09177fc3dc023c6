"""Where the container engine is, and a client on it.

The engine is anything that speaks the Docker Engine API: Docker, or Podman's compatible service.
Its address is a URL, `unix:///path/to.sock` or `tcp://host:port`. Without one given, the engine
is `DOCKER_HOST`, else Podman's system socket when it exists, else Docker's.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import aiodocker
import aiohttp

from sokovan.images.errors import ImagesError

PODMAN_SOCKET = Path("/run/podman/podman.sock")
DOCKER_SOCKET = Path("/var/run/docker.sock")
PING_TIMEOUT = 10.0


class EngineError(ImagesError):
    """The engine cannot be reached or refused a request; the message says which and why."""


def engine_url(flag: str | None) -> str:
    """The engine to use: `flag` when given, else DOCKER_HOST, else a local socket."""
    if flag:
        return flag
    env = os.environ.get("DOCKER_HOST", "").strip()
    if env:
        return env
    if PODMAN_SOCKET.exists():
        return f"unix://{PODMAN_SOCKET}"
    return f"unix://{DOCKER_SOCKET}"


def _client_url(url: str) -> str:
    """aiodocker composes request URLs from the address: plain TCP is spoken as http."""
    if url.startswith("tcp://"):
        return "http://" + url.removeprefix("tcp://")
    if url.startswith(("unix://", "http://", "https://")):
        return url
    raise EngineError(f"engine address {url!r} is neither unix:///path nor tcp://host:port")


# A call the engine does not answer in time fails (aiodocker's default waits for ever): its
# long-running calls (pull, push, build, wait, logs, events) keep no read limit of their own.
REQUEST_TIMEOUT = aiohttp.ClientTimeout(sock_connect=30, sock_read=180)


def connect(url: str) -> aiodocker.Docker:
    """A client on the engine at `url`, made inside a running event loop; close it when done.

    Nothing is sent yet: `ping` says whether the engine answers.
    """
    return aiodocker.Docker(url=_client_url(url), timeout=REQUEST_TIMEOUT)


async def ping(docker: aiodocker.Docker, url: str) -> dict[str, Any]:
    """The engine's version document; EngineError with the reason when it does not answer."""
    try:
        async with asyncio.timeout(PING_TIMEOUT):
            return await docker.version()
    except TimeoutError as exc:
        raise EngineError(f"engine {url} did not answer within {PING_TIMEOUT:.0f}s") from exc
    except (aiodocker.DockerError, aiohttp.ClientError, OSError, ValueError) as exc:
        raise EngineError(f"engine {url} does not answer: {describe(exc)}") from exc


def describe(exc: BaseException) -> str:
    """One line for an engine error: aiodocker's message without its status wrapper."""
    if isinstance(exc, aiodocker.DockerError):
        return str(exc.message).strip().splitlines()[0] if exc.message else f"HTTP {exc.status}"
    return (str(exc) or type(exc).__name__).strip().splitlines()[0]
