"""The manager is SIGKILLed ten times while 500 sessions are created and run on a hollow fleet:
nothing it had accepted may be lost, duplicated, stuck or leak its slots.

Creation requests that fail because the manager is down are retried with the same creation_id
(a repeated creation_id answers 200 with the session the first, maybe unanswered, try made)."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from sokovan.common.settings import Settings
from sokovan.harness import ManagerProc, wait_agents
from tests.fault.harness import (
    AgentProc,
    Api,
    InvariantChecker,
    InvariantSampler,
    outcome,
    settle,
    summarize,
)

SESSIONS = 500
KILLS = 10
CREATORS = 8
CREATION_SPREAD = 14.0  # seconds over which the creations are paced, so the kills land among them
SETTLE = 120.0
RESOURCES = {"cpu": 1, "mem": "256m"}
SEED = 20240607


def _body(i: int, rng: random.Random) -> dict[str, Any]:
    long_running = i % 2 == 1
    return {
        "name": f"crash-{i:04d}",
        "image": "shell",
        "type": "batch",
        "command": "serve" if long_running else "sleep 2",
        "resources": RESOURCES,
        "creation_id": f"crash-{uuid.UUID(int=rng.getrandbits(128)).hex}",
    }


def _is(want: tuple[str, str | None, str | None]) -> Callable[[dict[str, Any]], bool]:
    return lambda session: outcome(session) == want


async def test_sessions_survive_ten_manager_sigkills(
    fresh_cluster_state: str, service_env: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    manager = ManagerProc(service_env, tmp_path)
    fleet = AgentProc(service_env, tmp_path, "chaos", "cpu=16,mem=64g", simulate=50)
    checker = InvariantChecker(settings.db_url)
    sampler = InvariantSampler(settings.db_url)
    try:
        manager.start()
        await manager.wait_healthy()
        await wait_agents(settings.db_url, 50)
        began = time.monotonic()
        sampler.start()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            api = Api(http, [manager.api], fresh_cluster_state)
            bodies = [_body(i, rng) for i in range(SESSIONS)]
            queue: asyncio.Queue[int] = asyncio.Queue()
            for i in range(SESSIONS):
                queue.put_nowait(i)
            created: dict[int, tuple[dict[str, Any], int, int]] = {}

            async def creator() -> None:
                while not queue.empty():
                    i = queue.get_nowait()
                    created[i] = await api.create_retrying(bodies[i])
                    await asyncio.sleep(CREATION_SPREAD * CREATORS / SESSIONS)

            creators = [asyncio.create_task(creator()) for _ in range(CREATORS)]

            kill_log: list[str] = []
            for n in range(KILLS):
                await asyncio.sleep(rng.uniform(0.3, 1.5))
                manager.kill()
                at = time.monotonic() - began
                manager.start()  # right away, same env and port
                up = await manager.wait_healthy()
                kill_log.append(f"kill {n + 1} at {at:.1f}s (created {len(created)}), up again in {up:.2f}s")
            kills_done = time.monotonic() - began
            await asyncio.gather(*creators)
            created_at = time.monotonic() - began
            print("\n" + "\n".join(kill_log))
            print(f"kills done at {kills_done:.1f}s; all {SESSIONS} creations answered at {created_at:.1f}s")

            # Exactly one session per creation_id, whatever the retries.
            ids = [created[i][0]["id"] for i in range(SESSIONS)]
            assert len(set(ids)) == SESSIONS
            replays = sum(1 for _, status, _ in created.values() if status == 200)
            retried = sum(1 for _, _, tries in created.values() if tries > 1)
            print(f"creations retried: {retried}; answered 200 (an earlier try had created it): {replays}")
            # A manager that is down refuses or drops connections; one that answers must not fail.
            assert api.server_errors == [], api.server_errors[:5]
            listed = await api.list_all()
            assert sorted(listed) == sorted(ids), "sessions listed != sessions created (lost or duplicated)"

            expected = {
                ids[i]: _is(("RUNNING", None, None) if i % 2 else ("TERMINATED", "SUCCESS", None))
                for i in range(SESSIONS)
            }
            settled = await settle(api, expected, SETTLE)
            print(f"all settled at {time.monotonic() - began:.1f}s: {summarize(settled.values())}")
            await sampler.stop()
            print(f"invariant samples during the chaos: {sampler.samples}, violations: {sampler.violations}")
            assert sampler.violations == []
            assert await checker.check() == []

            running = [ids[i] for i in range(SESSIONS) if i % 2]
            await asyncio.gather(*(api.delete_retrying(sid) for sid in running))
            ended = {sid: _is(("TERMINATED", None, "USER_CANCELLED")) for sid in running}
            settled = await settle(api, ended, 60)
            print(f"all terminated at {time.monotonic() - began:.1f}s: {summarize(settled.values())}")
            assert await checker.check() == []
    finally:
        await sampler.stop()
        await checker.close()
        fleet.stop()
        manager.stop()
