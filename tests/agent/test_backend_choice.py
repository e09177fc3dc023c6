"""Which backend an agent runs: `auto` falls back to processes without an engine, `container`
refuses to start without one, and with one every heartbeat says `container`."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from sokovan.agent.backends import ContainerConfig
from sokovan.agent.daemon import AgentConfig, AgentDaemon
from sokovan.agent.runtime import AgentStartError
from sokovan.common.events import AgentHeartbeat
from sokovan.common.settings import Settings
from sokovan.common.slots import ResourceSlots
from tests.agent.conftest import AgentEvents
from tests.agent.test_cli import run_cli
from tests.services import service

NO_ENGINE = "unix:///nonexistent/engine.sock"


def config(tmp_path: Path, containers: ContainerConfig) -> AgentConfig:
    return AgentConfig(
        agent_id=f"agent-{uuid.uuid4().hex[:8]}",
        slots=ResourceSlots.parse({"cpu": 1, "mem": "1g"}),
        rpc_port=0,
        work_dir=tmp_path / "work",
        heartbeat_interval=0.5,
        containers=containers,
    )


async def test_auto_without_an_engine_runs_processes(settings: Settings, tmp_path: Path) -> None:
    daemon = AgentDaemon(settings, config(tmp_path, ContainerConfig(backend="auto", engine=NO_ENGINE)))
    await daemon.start()
    try:
        assert daemon.backend.name == "process"
    finally:
        await daemon.stop()


async def test_container_without_an_engine_refuses_to_start(settings: Settings, tmp_path: Path) -> None:
    daemon = AgentDaemon(settings, config(tmp_path, ContainerConfig(backend="container", engine=NO_ENGINE)))
    with pytest.raises(AgentStartError, match="--backend container"):
        await daemon.start()


async def test_with_an_engine_the_heartbeat_says_container(
    settings: Settings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    engine = service("SOKOVAN_ENGINE", "")
    registry = service("SOKOVAN_REGISTRY", "")
    if not engine or not registry:
        pytest.fail("no container engine: run `make services`")
    daemon = AgentDaemon(
        settings, config(tmp_path, ContainerConfig(backend="auto", engine=engine, registries=(registry,)))
    )
    await daemon.start()
    try:
        events = AgentEvents(redis, settings, daemon.agent_id)
        beat = await events.wait_for(lambda e: isinstance(e, AgentHeartbeat))
        assert isinstance(beat, AgentHeartbeat)
        assert beat.backend == "container" and beat.registries == [registry]
        assert f"{registry}/shell:latest" in beat.images
    finally:
        await daemon.stop()


def test_the_command_says_why_it_cannot_start(settings: Settings) -> None:
    env = {**os.environ, "SOKOVAN_REDIS_URL": settings.redis_url, "SOKOVAN_CLUSTER_SECRET": "s" * 24}
    done = run_cli(["--rpc-port", "0", "--backend", "container", "--engine", NO_ENGINE], env)
    assert done.returncode != 0
    assert "--backend container" in done.stderr and "Traceback" not in done.stderr, done.stderr
    bad = run_cli(["--rpc-port", "0", "--registry", "not a registry"], env)
    assert bad.returncode != 0 and "bad --registry" in bad.stderr, bad.stderr
    bad = run_cli(["--rpc-port", "0", "--engine", "ftp://x"], env)
    assert bad.returncode != 0 and "bad --engine" in bad.stderr, bad.stderr
