"""Which backend runs an agent's kernels, and what the daemon asks of either.

`--backend auto` (the default) runs kernels in containers when the engine (`--engine`, else
`DOCKER_HOST`, else Podman's or Docker's socket) answers `GET /_ping`, and as host processes
otherwise, with a warning; `container` refuses to start without an engine; `process` never looks
for one. The daemon drives both through `KernelBackend`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import aiodocker
import aiohttp
import structlog
from pydantic import BaseModel

from sokovan.agent.container.backend import ContainerBackend
from sokovan.agent.container.config import ContainerOptions
from sokovan.agent.container.engine_client import agent_client, close_client
from sokovan.agent.container.firewall import Firewall
from sokovan.agent.container.images import ImageStore
from sokovan.agent.container.networks import SessionNetworks
from sokovan.agent.events import Emit
from sokovan.agent.kernel_uids import KernelUids
from sokovan.common.rpc import KernelSpec, LogsResponse, ReconcileItem
from sokovan.images.engine import EngineError, describe, engine_url

log = structlog.get_logger(__name__)

BackendName = Literal["auto", "container", "process"]
BACKENDS: tuple[BackendName, ...] = ("auto", "container", "process")
PING_TIMEOUT = 3.0


class KernelBackend(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def registries(self) -> list[str]: ...

    def running_kernels(self) -> list[str]: ...
    def images_offered(self) -> list[str]: ...
    def describe(self) -> dict[str, object]: ...
    async def start(self) -> list[BaseModel]: ...
    async def check_and_pull(self, spec: KernelSpec) -> None: ...
    async def create(self, spec: KernelSpec) -> None: ...
    async def destroy(self, kernel_id: str, forced: bool = False, grace: float | None = None) -> None: ...
    async def reconcile(self, item: ReconcileItem) -> None: ...
    async def read_logs(self, kernel_id: str) -> LogsResponse | None: ...
    async def shutdown(self) -> None: ...
    async def detach(self) -> list[str]: ...
    async def police(self) -> list[str]: ...
    async def sweep(self, now: float) -> list[str]: ...


@dataclass(frozen=True)
class ContainerConfig:
    """The agent's container options (`--backend`, `--engine`, `--registry`, ...). The command's
    default is `auto`; a daemon built in code runs processes unless told otherwise."""

    backend: BackendName = "process"
    engine: str | None = None  # None: DOCKER_HOST, else the usual sockets
    registries: tuple[str, ...] = ()
    allow_outbound: bool = False
    options: ContainerOptions = field(default_factory=ContainerOptions)


async def ping(docker: aiodocker.Docker) -> None:
    """`GET /_ping`; raises when the engine does not answer OK in time."""
    async with asyncio.timeout(PING_TIMEOUT):
        async with docker._query("_ping") as response:
            text = await response.text()
    if text.strip() != "OK":
        raise EngineError(f"the engine answered {text[:80]!r} to _ping")


async def open_engine(config: ContainerConfig) -> tuple[aiodocker.Docker, str] | str:
    """A client on the engine and its URL, or why there is none."""
    url = engine_url(config.engine)
    try:
        docker = agent_client(url)
    except EngineError as exc:
        return str(exc)
    try:
        await ping(docker)
    except (
        TimeoutError,
        aiodocker.DockerError,
        aiohttp.ClientError,
        OSError,
        EngineError,
        ValueError,
    ) as exc:
        await close_client(docker)
        why = "no answer in time" if isinstance(exc, TimeoutError) else describe(exc)
        return f"engine {url}: {why}"
    return docker, url


def container_backend(
    docker: aiodocker.Docker,
    config: ContainerConfig,
    *,
    agent_id: str,
    work_dir: Path,
    emit: Emit,
    uids: KernelUids,
    kill_grace: float,
    service_host: str,
    keep_ended_kernels: float,
) -> ContainerBackend:
    return ContainerBackend(
        agent_id,
        docker,
        work_dir,
        emit,
        images=ImageStore(docker, config.registries),
        networks=SessionNetworks(docker, Firewall(outbound=config.allow_outbound)),
        uids=uids,
        options=config.options,
        kill_grace=kill_grace,
        service_host=service_host,
        keep_ended_kernels=keep_ended_kernels,
    )
