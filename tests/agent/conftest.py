"""Fixtures for agent tests: an in-process agent on a free port and a reader of its events."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from sokovan.agent.daemon import AgentConfig, AgentDaemon
from sokovan.agent.hollow import HollowConfig, HollowFleet
from sokovan.agent.images import ImageCatalog, ImageEnv
from sokovan.bus.streams import answered_key, beats_key, stream_key
from sokovan.common.events import AgentEvent, decode_event
from sokovan.common.rpc import AgentRPCClient, KernelSpec, signed_headers
from sokovan.common.settings import Settings
from sokovan.common.slots import ResourceSlots
from sokovan.harness import reachable
from tests.support import stopped_after

WAIT = 10.0


class Empty(BaseModel):
    """The body of a `ping`."""


_LIFECYCLE = {
    "kernel.pulling": 0,
    "kernel.prepared": 1,
    "kernel.image_pull_failed": 1,
    "kernel.running": 2,
    "kernel.creation_failed": 2,
    "kernel.terminated": 3,
}


def _entry_order(entry_id: bytes, name: str) -> tuple[int, int, int]:
    ms, _, seq = entry_id.decode().partition("-")
    return int(ms), _LIFECYCLE.get(name, -1), int(seq or 0)


class AgentEvents:
    """The events one agent (or, with `agent_id=None`, every agent) put on the streams (its events',
    its heartbeats' and what its RPC answers carried too), in the order Redis took them."""

    def __init__(self, redis: aioredis.Redis, settings: Settings, agent_id: str | None) -> None:
        self._redis = redis
        self._last = {key(settings.etcd_prefix): "0-0" for key in (stream_key, beats_key, answered_key)}
        self._secret = settings.cluster_secret or ""
        self._agent_id = agent_id
        self.seen: list[AgentEvent] = []

    async def poll(self) -> None:
        reply: Any = await self._redis.xread(dict(self._last), count=1000, block=100)
        read: list[tuple[bytes, dict[Any, Any]]] = []
        for stream, entries in reply or []:
            for entry_id, fields in entries:
                self._last[stream.decode()] = entry_id.decode()
                read.append((entry_id, fields))
        # Across streams, entries of the same millisecond carry no order of their own: a kernel's
        # events, which an agent emits in its lifecycle's order, are put in that order.
        decoded = [(entry_id, decode_event(fields, self._secret)) for entry_id, fields in read]
        for _, event in sorted(decoded, key=lambda entry: _entry_order(entry[0], entry[1].name)):
            if self._agent_id is None or event.agent_id == self._agent_id:
                self.seen.append(event)

    async def wait_for(self, predicate: Callable[[AgentEvent], bool], within: float = WAIT) -> AgentEvent:
        """The first event (of all seen so far) that matches, waiting for it if needed."""
        async with asyncio.timeout(within):
            while True:
                for event in self.seen:
                    if predicate(event):
                        return event
                await self.poll()

    async def wait_kernel(self, name: str, kernel_id: str, within: float = WAIT) -> AgentEvent:
        return await self.wait_for(
            lambda e: e.name == name and getattr(e, "kernel_id", None) == kernel_id, within
        )

    def of_kernel(self, kernel_id: str) -> list[str]:
        return [e.name for e in self.seen if getattr(e, "kernel_id", None) == kernel_id]


async def run_kernel(
    client: AgentRPCClient, rpc_addr: str, events: AgentEvents, kernel: KernelSpec, agent_id: str = ""
) -> AgentEvent:
    """Creates `kernel` and waits until it runs: its KernelRunning."""
    await client.create_kernels(rpc_addr, [kernel], agent_id=agent_id)
    return await events.wait_kernel("kernel.running", kernel.kernel_id)


async def post_rpc(addr: str, method: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, Any]:
    """POSTs `body` as it is to `http://<addr>/rpc/<method>` with `headers` (signed or not, by the
    test): the status and the JSON answer (every RPC answer, an error too, is a JSON object)."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://{addr}/rpc/{method}", data=body, headers=headers) as resp,
    ):
        return resp.status, await resp.json()


def signed(agent: AgentDaemon, body: bytes, **kwargs: Any) -> dict[str, str]:
    """Headers signing `body` with the agent's own cluster secret."""
    return signed_headers(agent.settings.cluster_secret or "", body, **kwargs)


async def assert_nothing_started(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient, rejected: str, agent_id: str = ""
) -> None:
    """The kernel `rejected` was neither started nor reported: a signed pull afterwards is served, and
    its events come after anything the rejected request could have emitted (one ordered outbox)."""
    accepted = spec("true")
    await client.check_and_pull(agent.rpc_addr, [accepted], agent_id=agent_id)
    await events.wait_kernel("kernel.prepared", accepted.kernel_id)
    assert events.of_kernel(rejected) == []
    assert agent.backend.running_kernels() == []
    assert not (agent.work_dir / rejected).exists()


def spec(command: str | None, **kwargs: object) -> KernelSpec:
    """A kernel spec with fresh ids and the `shell` image unless told otherwise."""
    values: dict[str, object] = {
        "kernel_id": f"k-{uuid.uuid4().hex[:12]}",
        "session_id": f"s-{uuid.uuid4().hex[:12]}",
        "image": "shell",
        "command": command,
    }
    values.update(kwargs)
    return KernelSpec.model_validate(values)


@pytest.fixture
async def agent(settings: Settings, redis: aioredis.Redis, tmp_path: Path) -> AsyncIterator[AgentDaemon]:
    config = AgentConfig(
        agent_id=f"agent-{uuid.uuid4().hex[:8]}",
        slots=ResourceSlots.parse({"cpu": 2, "mem": "1g"}),
        rpc_port=0,
        catalog=ImageCatalog({"custom": ImageEnv(path=("/usr/bin", "/bin"), env={"IMG_VAR": "from-image"})}),
        work_dir=reachable(tmp_path / "work"),  # kernels run under their own uids as root
        kill_grace=1.0,
        heartbeat_interval=0.5,
    )
    daemon = AgentDaemon(settings, config)
    await daemon.start()
    yield daemon
    await daemon.stop()


@pytest.fixture
def events(agent: AgentDaemon, redis: aioredis.Redis, settings: Settings) -> AgentEvents:
    return AgentEvents(redis, settings, agent.agent_id)


FleetFactory = Callable[..., Awaitable[HollowFleet]]


@pytest.fixture
async def fleet_factory(settings: Settings, redis: aioredis.Redis) -> AsyncIterator[FleetFactory]:
    """Starts hollow fleets on free ports (`HollowConfig` fields as keywords); stops them after the test."""
    async with stopped_after() as fleets:

        async def start(count: int, **options: Any) -> HollowFleet:
            options.setdefault("rpc_port", 0)
            options.setdefault("heartbeat_interval", 0.5)
            fleet = HollowFleet(settings, HollowConfig(count=count, **options))
            await fleet.start()
            fleets.append(fleet)
            return fleet

        yield start


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[AgentRPCClient]:
    rpc = AgentRPCClient(settings.cluster_secret or "")
    yield rpc
    await rpc.close()
