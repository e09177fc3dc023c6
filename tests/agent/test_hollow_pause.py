"""A hollow fleet's pause file silences the agents it lists (their kernels go on), and `--class`
and the shared health summary reach every agent's heartbeat."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis.asyncio as aioredis

from sokovan.agent.pause_file import PauseFile, read_ids
from sokovan.common.events import AgentHeartbeat, KernelTerminated
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.settings import Settings
from sokovan.common.types import AgentClass
from tests.agent.conftest import AgentEvents, FleetFactory, run_kernel, spec
from tests.agent.test_cli import agent_process


def beats(events: AgentEvents, since: int = 0) -> list[AgentHeartbeat]:
    return [e for e in events.seen[since:] if isinstance(e, AgentHeartbeat)]


async def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while True:
            if condition():
                return
            await asyncio.sleep(0.05)


async def drain(events: AgentEvents, seconds: float) -> None:
    """Reads the stream for `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await events.poll()


async def test_listed_agents_stop_heartbeating_until_they_are_removed(
    fleet_factory: FleetFactory,
    redis: aioredis.Redis,
    settings: Settings,
    client: AgentRPCClient,
    tmp_path: Path,
) -> None:
    pause = tmp_path / "paused"
    fleet = await fleet_factory(
        50, heartbeat_interval=0.3, registration_spread=0.2, pause_file=pause, agent_class=AgentClass.BORROWED
    )
    ids = list(fleet.agents)
    silenced, talking = ids[:30], ids[30:]
    events = AgentEvents(redis, settings, None)
    await events.wait_for(lambda _: {b.agent_id for b in beats(events)} >= set(ids))
    assert {(b.agent_class, b.health.ok, b.kernel_count) for b in beats(events)} == {("borrowed", True, 0)}

    kernel = spec("sleep 1.5")
    await run_kernel(client, fleet.rpc_addr, events, kernel, agent_id=silenced[0])
    pause.write_text("# cut off\n" + "\n".join(silenced) + "\n")
    await until(lambda: fleet.pauses.paused == frozenset(silenced))
    await drain(events, 0.5)  # a beat the loop had sent before it read the file
    mark = len(events.seen)
    await drain(events, 1.5)
    assert {b.agent_id for b in beats(events, mark)} == set(talking)
    ended = await events.wait_kernel("kernel.terminated", kernel.kernel_id)  # its timer ran on
    assert isinstance(ended, KernelTerminated) and (ended.agent_id, ended.exit_code) == (silenced[0], 0)

    last_seq = {b.agent_id: b.seq for b in beats(events)}
    pause.write_text("")
    await until(lambda: not fleet.pauses.paused)
    mark = len(events.seen)
    await events.wait_for(lambda _: {b.agent_id for b in beats(events, mark)} >= set(silenced))
    resumed = {b.agent_id: b.seq for b in reversed(beats(events, mark))}
    assert all(resumed[a] == last_seq[a] + 1 for a in silenced)  # the same boot, its sequence goes on
    assert {b.boot_id for b in beats(events) if b.agent_id == silenced[0]} == {
        fleet.agents[silenced[0]].boot_id
    }


def test_the_pause_file(tmp_path: Path) -> None:
    path = tmp_path / "paused"
    assert PauseFile(None).refresh() == frozenset()
    assert PauseFile(path).refresh() == frozenset()  # no file: nobody
    path.write_text("a\n\n  b  # the second\n# c\n")
    assert read_ids(path) == {"a", "b"}
    assert PauseFile(path).refresh() == {"a", "b"}


async def test_cli_pause_file_and_class_reach_the_fleet(
    service_env: dict[str, str], settings: Settings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    prefix = f"pause{uuid.uuid4().hex[:6]}"
    ids = [f"{prefix}-000{i}" for i in range(3)]
    pause = tmp_path / "paused"
    pause.write_text(f"{ids[1]}\n")
    args = ["--simulate", "3", "--id", prefix, "--rpc-port", "0", "--heartbeat-interval", "0.3"]
    args += ["--class", "sensitive", "--pause-file", str(pause)]
    events = AgentEvents(redis, settings, None)
    async with agent_process(args, service_env, settings):
        await events.wait_for(lambda _: {b.agent_id for b in beats(events)} >= {ids[0], ids[2]})
        await drain(events, 0.7)
        assert ids[1] not in {b.agent_id for b in beats(events)}  # never registered while listed
        pause.unlink()
        first = await events.wait_for(lambda e: isinstance(e, AgentHeartbeat) and e.agent_id == ids[1])
    assert isinstance(first, AgentHeartbeat) and (first.seq, first.agent_class) == (1, "sensitive")
