"""Three managers on one PostgreSQL/Redis/etcd behave as one: 5,000 sessions created through all
three APIs at once while a third of them are terminated through any API; no agent is ever
over-allocated, occupancy never drifts from the kernels, and every session ends where it should."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

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

pytestmark = pytest.mark.many_connections  # three managers: about 65 connections

MANAGERS = 3
AGENTS = 100
SESSIONS = 5000
CLIENTS = 48
SETTLE = 150.0
# 5,000 x 0.1 cpu = 500 of the fleet's 800: every session fits at once, so none has to wait.
RESOURCES = {"cpu": "0.1", "mem": "128m"}
SEED = 31337

Check = Callable[[dict[str, Any]], bool]


def _user_cancelled(session: dict[str, Any]) -> bool:
    """Terminated after it was placed, or cancelled while still PENDING: either way by the user."""
    return outcome(session) in {
        ("TERMINATED", None, "USER_CANCELLED"),
        ("CANCELLED", None, "USER_CANCELLED"),
    }


def _is(want: tuple[str, str | None, str | None]) -> Check:
    return lambda session: outcome(session) == want


def _plan(rng: random.Random) -> tuple[list[dict[str, Any]], set[int], list[str]]:
    """Bodies, which indexes get a DELETE, and the kind of each: 'cancel', 'sleep' or 'serve'.

    Sessions to cancel run until destroyed (so their end is the user's, never a natural exit); of
    the rest, alternately `sleep 3` (TERMINATED/SUCCESS) and `serve` (RUNNING at the end)."""
    cancel = set(rng.sample(range(SESSIONS), SESSIONS // 3))
    bodies: list[dict[str, Any]] = []
    kinds: list[str] = []
    for i in range(SESSIONS):
        kind = "cancel" if i in cancel else ("sleep" if i % 2 else "serve")
        kinds.append(kind)
        bodies.append(
            {
                "name": f"trio-{i:05d}",
                "image": "shell",
                "type": "batch",
                "command": "sleep 3" if kind == "sleep" else "serve",
                "resources": RESOURCES,
                "creation_id": f"trio-{uuid.UUID(int=rng.getrandbits(128)).hex}",
            }
        )
    return bodies, cancel, kinds


async def test_three_managers_behave_as_one(
    fresh_cluster_state: str, service_env: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    managers = [ManagerProc(service_env, tmp_path, f"manager-{n}") for n in range(MANAGERS)]
    fleet = AgentProc(service_env, tmp_path, "trio", "cpu=8,mem=32g", simulate=AGENTS)
    sampler = InvariantSampler(settings.db_url)
    checker = InvariantChecker(settings.db_url)
    try:
        for m in managers:
            m.start()
        for m in managers:
            await m.wait_healthy()
        await wait_agents(settings.db_url, AGENTS)
        bodies, cancel, kinds = _plan(rng)
        began = time.monotonic()
        sampler.start()
        connector = aiohttp.TCPConnector(limit=CLIENTS * 2)
        async with aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=60)
        ) as http:
            api = Api(http, [m.api for m in managers], fresh_cluster_state)
            ids: dict[int, str] = {}
            deletes: list[asyncio.Task[None]] = []
            next_index = iter(range(SESSIONS))

            async def delete_soon(i: int) -> None:
                await asyncio.sleep(rng.uniform(0.0, 3.0))
                await api.delete_retrying(ids[i], api=rng.randrange(MANAGERS))

            async def client() -> None:
                for i in next_index:
                    session, _, _ = await api.create_retrying(bodies[i], api=i % MANAGERS)
                    ids[i] = session["id"]
                    if i in cancel:
                        deletes.append(asyncio.create_task(delete_soon(i)))

            await asyncio.gather(*(client() for _ in range(CLIENTS)))
            created = time.monotonic() - began
            await asyncio.gather(*deletes)
            deleted = time.monotonic() - began
            print(
                f"\n{SESSIONS} sessions created through {MANAGERS} APIs in {created:.1f}s "
                f"({SESSIONS / created:.0f}/s); {len(cancel)} DELETEs answered by {deleted:.1f}s"
            )
            assert len(set(ids.values())) == SESSIONS

            wanted: dict[str, Check] = {}
            for i, kind in enumerate(kinds):
                if kind == "cancel":
                    wanted[ids[i]] = _user_cancelled
                elif kind == "sleep":
                    wanted[ids[i]] = _is(("TERMINATED", "SUCCESS", None))
                else:
                    wanted[ids[i]] = _is(("RUNNING", None, None))
            settled = await settle(api, wanted, SETTLE, poll=2.0)
            took = time.monotonic() - began
            await sampler.stop()
            print(f"all {SESSIONS} settled at {took:.1f}s: {summarize(settled.values())}")
            print(f"invariant samples: {sampler.samples}, violations: {len(sampler.violations)}")
            print(f"most connections to the database at once: {sampler.max_db_connections}")
            print(f"requests retried: {len(api.failures)}, of them 5xx: {len(api.server_errors)}")
            assert sampler.violations == [], sampler.violations[:5]
            assert await checker.check() == []
            assert len(settled) == SESSIONS, "sessions listed != sessions created"
            for m in managers:
                assert m.proc is not None and m.proc.poll() is None, m.log_tail()
            # Last, so that everything above is checked even when it fails: no request failed
            # (a 5xx under load is a failure even though the retry with its creation_id heals it).
            assert api.failures == [], f"{len(api.failures)} failed requests, e.g. {api.failures[:3]}"
    finally:
        await sampler.stop()
        await checker.close()
        fleet.stop()
        for m in managers:
            m.stop()
