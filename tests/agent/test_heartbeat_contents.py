"""What a heartbeat says about its agent: class, health (free disk, load) and kernel count."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from sokovan.agent.daemon import AgentConfig, AgentDaemon
from sokovan.agent.health import check_health, parse_size
from sokovan.common.events import AgentHeartbeat
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.settings import Settings
from sokovan.common.types import AgentClass
from tests.agent.conftest import AgentEvents, run_kernel, spec
from tests.agent.test_cli import agent_process, run_cli_with_config
from tests.support import stopped_after

AgentStarter = Callable[..., Awaitable[AgentDaemon]]


@pytest.fixture
async def started(settings: Settings, tmp_path: Path) -> AsyncIterator[AgentStarter]:
    """Starts in-process agents (`AgentConfig` fields as keywords) and stops them after the test."""
    async with stopped_after() as agents:

        async def start(**options: Any) -> AgentDaemon:
            options.setdefault("agent_id", f"beat-{uuid.uuid4().hex[:8]}")
            options.setdefault("work_dir", tmp_path / str(options["agent_id"]))
            options.setdefault("heartbeat_interval", 0.3)
            daemon = AgentDaemon(settings, AgentConfig(rpc_port=0, **options))
            await daemon.start()
            agents.append(daemon)
            return daemon

        yield start


async def test_a_heartbeat_carries_class_health_and_kernel_count(
    started: AgentStarter, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    agent = await started(agent_class=AgentClass.SENSITIVE)
    events = AgentEvents(redis, settings, agent.agent_id)
    first = await events.wait_for(lambda e: isinstance(e, AgentHeartbeat))
    assert isinstance(first, AgentHeartbeat)
    assert first.agent_class == "sensitive"
    assert first.health.ok and first.health.problems == []
    assert first.health.work_dir_free is not None and first.health.work_dir_free > 64 * 2**20
    assert first.health.load1 is not None and first.health.load1 >= 0
    assert (first.kernel_count, first.running_kernels) == (0, [])

    kernel = spec(None, session_type="interactive")
    await run_kernel(client, agent.rpc_addr, events, kernel)
    beat = await events.wait_for(lambda e: isinstance(e, AgentHeartbeat) and bool(e.kernel_count))
    assert isinstance(beat, AgentHeartbeat)
    assert (beat.kernel_count, beat.running_kernels) == (1, [kernel.kernel_id])


async def test_too_little_free_disk_makes_the_agent_unhealthy(
    started: AgentStarter, redis: aioredis.Redis, settings: Settings
) -> None:
    agent = await started(min_free_disk=parse_size("500t"))
    events = AgentEvents(redis, settings, agent.agent_id)
    beat = await events.wait_for(lambda e: isinstance(e, AgentHeartbeat))
    assert isinstance(beat, AgentHeartbeat)
    assert beat.health.ok is False
    assert len(beat.health.problems) == 1 and "below the minimum" in beat.health.problems[0]
    assert str(agent.work_dir) in beat.health.problems[0]
    assert beat.agent_class == "standard"


def test_check_health(tmp_path: Path) -> None:
    assert check_health(tmp_path, 0).ok
    missing = check_health(tmp_path / "missing", 0)
    assert not missing.ok and missing.work_dir_free is None and "cannot read" in missing.problems[0]


@pytest.mark.parametrize(
    ("text", "size"), [("64m", 64 * 2**20), ("500t", 500 * 2**40), (4096, 4096), ("1.5g", 3 * 2**29)]
)
def test_parse_size(text: str | int, size: int) -> None:
    assert parse_size(text) == size


async def test_cli_class_and_min_free_disk_reach_the_heartbeat(
    service_env: dict[str, str], settings: Settings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    agent_id = f"cli-{uuid.uuid4().hex[:8]}"
    args = ["--id", agent_id, "--rpc-port", "0", "--work-dir", str(tmp_path / "work")]
    args += ["--class", "borrowed", "--min-free-disk", "500t", "--heartbeat-interval", "0.3"]
    events = AgentEvents(redis, settings, agent_id)
    async with agent_process(args, service_env, settings):
        beat = await events.wait_for(lambda e: isinstance(e, AgentHeartbeat))
    assert isinstance(beat, AgentHeartbeat)
    assert (beat.agent_class, beat.health.ok, beat.kernel_count) == ("borrowed", False, 0)


@pytest.mark.parametrize(
    ("args", "config", "message"),
    [
        (["--class", "gold"], None, "Invalid value for '--class'"),
        ([], 'class = "gold"', "bad --class 'gold'"),
        (["--min-free-disk", "lots"], None, "bad --min-free-disk"),
        ([], "min_free_disk = -5", "bad --min-free-disk"),
        (["--simulate", "2", "--class", "gold"], None, "Invalid value for '--class'"),
    ],
)
def test_bad_class_or_min_free_disk_is_refused(
    service_env: dict[str, str], tmp_path: Path, args: list[str], config: str | None, message: str
) -> None:
    result = run_cli_with_config(args, config, tmp_path, service_env)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
