"""Helpers of the container tests: a batch session's output, and the engine's view of a kernel."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiodocker

from sokovan.agent.container.engine_client import agent_client, close_client
from tests.containers.conftest import engine
from tests.e2e.cluster import Client

TERMINAL = {"TERMINATED", "ERROR", "CANCELLED"}


async def run_batch(
    api: Client, command: str, *, image: str = "python:3", within: float = 90, **extra: Any
) -> tuple[dict[str, Any], str, str]:
    """Create a batch session, wait for its end; (session, stdout, stderr) of its first kernel."""
    resources = extra.pop("resources", {"cpu": 1, "mem": "256m"})
    created = await api.create(image=image, type="batch", command=command, resources=resources, **extra)
    session = await api.wait_status(created["id"], TERMINAL, within=within)
    stdout, stderr = await logs(api, created["id"])
    return session, stdout, stderr


class KernelMoves:
    """The `kernel.status` events of the event stream, read while the block runs."""

    def __init__(self, api: Client) -> None:
        self.api = api
        self.moves: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()

    async def _read(self) -> None:
        headers = {"Authorization": f"Bearer {self.api.token}"}
        async with self.api.http.get(f"{self.api.api}/v2/events", headers=headers) as resp:
            self._connected.set()
            async for raw in resp.content:
                line = raw.decode().strip()
                if line.startswith("data:"):
                    data = json.loads(line[5:])
                    if data.get("name") == "kernel.status":
                        self.moves.append(data)

    async def __aenter__(self) -> KernelMoves:
        self._task = asyncio.create_task(self._read())
        await asyncio.wait_for(self._connected.wait(), 10)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.sleep(0.5)  # the last events of the session
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def pulled(self, session_id: str) -> bool:
        return any(m.get("session_id") == session_id and m.get("to") == "PULLING" for m in self.moves)


async def logs(api: Client, sid: str) -> tuple[str, str]:
    status, data = await api.request("GET", f"/v2/sessions/{sid}/logs")
    assert status == 200, data
    items = data["items"]
    return (items[0]["stdout"], items[0]["stderr"]) if items else ("", "")


async def containers_of(kernel_id: str) -> list[dict[str, Any]]:
    """The engine's containers (any state) labelled with `kernel_id`."""
    docker = agent_client(engine())
    try:
        found = await docker.containers.list(
            all=True, filters={"label": [f"org.sokovan.kernel-id={kernel_id}"]}
        )
        return [c._container for c in found]
    finally:
        await close_client(docker)


async def until(check: Any, what: str, within: float = 60) -> Any:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.3)


async def remove_image(reference: str) -> None:
    docker = agent_client(engine())
    try:
        await docker.images.delete(reference, force=True)
    except aiodocker.DockerError as exc:
        if exc.status != 404:
            raise
    finally:
        await close_client(docker)
