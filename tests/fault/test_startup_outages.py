"""Daemons started while a service is away wait for it, then carry on.

A manager started while PostgreSQL is unreachable, and an agent fleet started while Redis is
unreachable, neither exit: each logs its wait and comes up once the service is back (the
forwarder of `outage_proxy` stands in for the stopped service).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from sokovan.common.settings import Settings
from sokovan.harness import ManagerProc, wait_agents
from tests.agent.agent_procs import children
from tests.fault.harness import AgentProc
from tests.fault.outage_proxy import OutageProxy, target_of, via

AGENTS = 2
AWAY = 6.0  # seconds the service stays away after the daemon started


async def _until_logged(proc: ManagerProc | AgentProc, text: str, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while text not in proc.log_text():
        assert proc.failure() is None, proc.failure()
        assert time.monotonic() < deadline, f"{text!r} never logged:\n{proc.log_tail()}"
        await asyncio.sleep(0.2)


async def test_manager_started_while_postgres_is_away_waits_for_it(
    fresh_cluster_state: str, service_env: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    proxy = OutageProxy(target_of(settings.db_url)).start()
    proxy.cut()
    manager = ManagerProc({**service_env, "SOKOVAN_DB_URL": via(settings.db_url, proxy)}, tmp_path)
    manager.start()
    try:
        await _until_logged(manager, "service.waiting")
        await asyncio.sleep(AWAY)
        assert manager.failure() is None, manager.failure()
        proxy.restore()
        await manager.wait_healthy(60)
    finally:
        manager.stop()
        proxy.close()


async def test_agents_started_while_redis_is_away_wait_for_it(
    fresh_cluster_state: str, service_env: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    manager = ManagerProc(service_env, tmp_path)
    proxy = OutageProxy(target_of(settings.redis_url)).start()
    proxy.cut()
    env = {**service_env, "SOKOVAN_REDIS_URL": via(settings.redis_url, proxy)}
    fleet: AgentProc | None = None
    try:
        manager.start()
        await manager.wait_healthy()
        fleet = AgentProc(env, tmp_path, "late-redis", "cpu=2,mem=4g", simulate=AGENTS)  # starts at once
        await _until_logged(fleet, "service.waiting")
        await asyncio.sleep(AWAY)
        assert fleet.failure() is None, fleet.failure()
        proxy.restore()
        await wait_agents(settings.db_url, AGENTS, watch=[fleet])
    finally:
        if fleet is not None:
            fleet.stop()
        manager.stop()
        proxy.close()


async def test_a_worker_that_dies_stops_the_manager_with_exit_1(
    fresh_cluster_state: str, service_env: dict[str, str], tmp_path: Path
) -> None:
    """`--workers 2`: the second worker SIGKILLed, the parent stops too and says which worker."""
    manager = ManagerProc(service_env, tmp_path, args=["--workers", "2"])
    manager.start()
    try:
        await manager.wait_healthy(60)
        assert manager.proc is not None
        workers = children(manager.proc.pid)
        assert len(workers) == 1, workers
        os.kill(workers[0], signal.SIGKILL)  # a pid this test started (through the manager)
        code = await asyncio.to_thread(manager.wait, 60)
    finally:
        if manager.running:
            manager.kill()
    last = manager.log_text().strip().splitlines()[-1]
    assert code == 1, manager.log_tail()
    assert last == f"Error: the manager stopped: worker {workers[0]} exited with status -9", last
