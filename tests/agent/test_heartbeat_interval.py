"""The heartbeat interval: the agent's own option, else the cluster's from etcd (followed live),
else 10 s — also when etcd cannot be reached. Timing checks are loose on purpose."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aetcd
import pytest
import redis.asyncio as aioredis
import structlog

from sokovan.agent.daemon import AgentConfig, AgentDaemon
from sokovan.agent.heartbeat_timing import HeartbeatInterval
from sokovan.common.events import AgentHeartbeat
from sokovan.common.settings import Settings
from sokovan.harness import free_port
from tests.agent.conftest import AgentEvents, FleetFactory


def lifecycle_key(settings: Settings) -> bytes:
    return f"{settings.etcd_prefix}/config/manager/node_lifecycle".encode()


async def put_interval(etcd: aetcd.Client, settings: Settings, interval: float) -> None:
    value = {"heartbeat_interval": interval, "heartbeat_timeout": max(30.0, interval * 3)}
    await etcd.put(lifecycle_key(settings), json.dumps(value).encode())


def beats(events: AgentEvents) -> list[AgentHeartbeat]:
    return [e for e in events.seen if isinstance(e, AgentHeartbeat)]


async def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while True:
            if condition():
                return
            await asyncio.sleep(0.05)


@pytest.fixture
async def agent_without_interval(settings: Settings, tmp_path: Path) -> AsyncIterator[AgentDaemon]:
    config = AgentConfig(agent_id=f"ival-{uuid.uuid4().hex[:8]}", rpc_port=0, work_dir=tmp_path / "work")
    daemon = AgentDaemon(settings, config)
    yield daemon
    await daemon.stop()


async def test_the_interval_comes_from_etcd_and_follows_its_changes(
    agent_without_interval: AgentDaemon, etcd: aetcd.Client, redis: aioredis.Redis, settings: Settings
) -> None:
    agent = agent_without_interval
    await put_interval(etcd, settings, 0.2)
    await agent.start()
    events = AgentEvents(redis, settings, agent.agent_id)
    await events.wait_for(lambda _: len(beats(events)) >= 6, within=8)  # 10 s apart without etcd
    assert agent.interval.current() == 0.2

    await put_interval(etcd, settings, 3.0)
    await until(lambda: agent.interval.current() == 3.0)
    await asyncio.sleep(0.5)  # a beat already due may still go out
    await events.poll()
    before = len(beats(events))
    await asyncio.sleep(2.0)
    for _ in range(3):
        await events.poll()
    assert len(beats(events)) - before <= 1

    await etcd.put(lifecycle_key(settings), b'{"heartbeat_interval": 0}')  # invalid: ignored
    await etcd.put(lifecycle_key(settings), b'{"heartbeat_interval": 0.5}')  # timeout 30 s: valid
    await until(lambda: agent.interval.current() == 0.5)
    await etcd.delete(lifecycle_key(settings))  # gone: the default
    await until(lambda: agent.interval.current() == 10.0)


async def test_an_explicit_interval_wins_over_etcd(
    settings: Settings, etcd: aetcd.Client, redis: aioredis.Redis, tmp_path: Path
) -> None:
    await put_interval(etcd, settings, 60.0)
    config = AgentConfig(
        agent_id=f"ival-{uuid.uuid4().hex[:8]}", rpc_port=0, work_dir=tmp_path, heartbeat_interval=0.2
    )
    agent = AgentDaemon(settings, config)
    await agent.start()
    try:
        events = AgentEvents(redis, settings, agent.agent_id)
        await events.wait_for(lambda _: len(beats(events)) >= 4, within=8)
        assert agent.interval.current() == 0.2
    finally:
        await agent.stop()


async def test_without_etcd_the_agent_starts_and_beats_every_ten_seconds(
    settings: Settings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    nowhere = settings.model_copy(update={"etcd": f"127.0.0.1:{free_port()}"})
    config = AgentConfig(agent_id=f"ival-{uuid.uuid4().hex[:8]}", rpc_port=0, work_dir=tmp_path)
    agent = AgentDaemon(nowhere, config)
    with structlog.testing.capture_logs() as logs:
        await agent.start()
        try:
            events = AgentEvents(redis, settings, agent.agent_id)
            first = await events.wait_for(lambda e: isinstance(e, AgentHeartbeat))
            assert isinstance(first, AgentHeartbeat) and first.seq == 1
            await until(lambda: any(entry["event"] == "agent.etcd_unreachable" for entry in logs), 5)
            assert agent.interval.current() == 10.0
        finally:
            await agent.stop()
    warnings = [entry for entry in logs if entry["event"] == "agent.etcd_unreachable"]
    assert len(warnings) == 1 and warnings[0]["log_level"] == "warning"


@pytest.mark.parametrize(("fixed", "current", "source"), [(2.5, 2.5, "option"), (None, 10.0, "etcd")])
def test_the_interval_before_etcd_answers(fixed: float | None, current: float, source: str) -> None:
    interval = HeartbeatInterval(Settings(), fixed)
    assert (interval.current(), interval.source) == (current, source)


async def test_a_hollow_fleet_reads_the_interval_from_etcd(
    fleet_factory: FleetFactory, etcd: aetcd.Client, redis: aioredis.Redis, settings: Settings
) -> None:
    await put_interval(etcd, settings, 0.2)
    fleet = await fleet_factory(3, heartbeat_interval=None, registration_spread=0.1)
    events = AgentEvents(redis, settings, None)
    await events.wait_for(
        lambda _: all(len([b for b in beats(events) if b.agent_id == a]) >= 5 for a in fleet.agents),
        within=8,
    )
    assert fleet.interval.current() == 0.2


def test_the_next_beat_is_always_after_the_time_given() -> None:
    """On a clock of millisecond steps (uvloop's), `after - phase` often divides to just below a
    whole number of intervals; the next beat must still come after `after`, or the fleet's
    heartbeat loop sends one agent's beat forever without yielding."""
    from sokovan.agent.hollow import _next_beat

    rng = random.Random(7)
    for _ in range(20_000):
        phase = round(rng.uniform(1_000, 100_000), 3) + 1.0
        after = round(phase + 2.0 * rng.randint(1, 1_000), 3)
        beat = _next_beat(phase, 2.0, after)
        assert after < beat <= after + 2.0
    assert _next_beat(1232.568, 2.0, 1234.568) > 1234.568
