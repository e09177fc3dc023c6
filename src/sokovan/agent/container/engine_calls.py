"""The engine calls of kernel containers that hold no state of the backend's: create and start one
(removed again if it does not start), wait until one has stopped, and find an agent's containers by
their labels after a restart."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiodocker
import structlog

from sokovan.agent.container import labels as L
from sokovan.agent.container.kernel import ContainerKernel
from sokovan.images.engine import describe

log = structlog.get_logger(__name__)

WAIT_RETRY = 2.0  # seconds between tries when the engine does not answer a kernel's wait


async def start_container(
    docker: aiodocker.Docker, body: dict[str, Any], name: str
) -> tuple[str, int | None]:
    """Create and start a container; its id and pid. One that does not start is removed."""
    container = await docker.containers.create(body, name=name)
    try:
        await container.start()
        state = (await container.show()).get("State") or {}
    except BaseException:
        with contextlib.suppress(aiodocker.DockerError, OSError):
            await container.delete(force=True)
        raise
    return container.id, state.get("Pid") or None


async def wait_stopped(docker: aiodocker.Docker, kernel: ContainerKernel) -> dict[str, Any] | None:
    """The container's state once it has stopped; None when it is gone."""
    container = docker.containers.container(kernel.container_id)
    while True:
        try:
            await container.wait(timeout=None)
            state: dict[str, Any] = (await container.show()).get("State") or {}
            if not state.get("Running"):
                return state
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                return None
            log.warning("kernel.wait_failed", kernel_id=kernel.kernel_id, error=describe(exc))
        except OSError as exc:
            log.warning("kernel.wait_failed", kernel_id=kernel.kernel_id, error=str(exc))
        await asyncio.sleep(WAIT_RETRY)


async def agent_containers(
    docker: aiodocker.Docker, agent_id: str
) -> list[tuple[ContainerKernel, dict[str, Any]]]:
    """The kernels of this agent's containers, running or stopped, each with its engine state."""
    found = []
    containers = await docker.containers.list(all=True, filters={"label": [f"{L.AGENT}={agent_id}"]})
    for container in containers:
        details = await container.show()
        info = L.KernelLabels.from_labels((details.get("Config") or {}).get("Labels") or {})
        if info is not None and info.agent_id == agent_id:
            found.append((ContainerKernel(info, container.id), details.get("State") or {}))
    return found
