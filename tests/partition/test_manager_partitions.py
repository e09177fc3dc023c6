"""One of three managers cut from Redis (every byte held both ways, nothing refused), while the
other two and the fleet go on (CONTRACT section 13).

The cut manager cannot read the agents' reports, publish hints or see the others' hints: it must
not judge any agent silent for its own silence (its `Watch` knows its reads did not get through),
and its API must still answer within 5 s (creates need only PostgreSQL). The other two keep
placing. Once the cut ends, every session acknowledged by any manager ends as it should, no agent
was declared DOWN, and the allocation invariants hold. `SOKOVAN_PARTITION_S` lengthens the cut.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from sokovan.common.settings import Settings
from sokovan.harness import ManagerProc, wait_agents
from tests.fault.harness import AgentProc, Api, InvariantChecker, settle
from tests.fault.outage_proxy import OutageProxy, target_of, via
from tests.fault.test_outages import ANSWER_WITHIN, _gone_down

AGENTS = 6
CUT = 12.0 + float(os.environ.get("SOKOVAN_PARTITION_S", "0"))
DONE = ("TERMINATED", "SUCCESS")


def _body(tag: str) -> dict[str, Any]:
    return {
        "image": "shell",
        "type": "batch",
        "command": "sleep 1",
        "resources": {"cpu": 1, "mem": "256m"},
        "creation_id": f"trio-cut-{tag}-{uuid.uuid4().hex[:8]}",
    }


async def test_one_of_three_managers_cut_from_redis(
    fresh_cluster_state: str, service_env: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    proxy = OutageProxy(target_of(settings.redis_url)).start()
    cut_env = {**service_env, "SOKOVAN_REDIS_URL": via(settings.redis_url, proxy)}
    managers = [
        ManagerProc(cut_env, tmp_path, "manager-cut"),
        *(ManagerProc(service_env, tmp_path, f"manager-{n}") for n in (1, 2)),
    ]
    fleet = AgentProc(service_env, tmp_path, "trio-cut", "cpu=8,mem=16g", simulate=AGENTS)
    checker = InvariantChecker(settings.db_url)
    history: list[str] = []
    began = time.monotonic()

    def note(what: str) -> None:
        history.append(f"{time.monotonic() - began:7.2f}s  {what}")

    try:
        for m in managers:
            m.start()
        for m in managers:
            await m.wait_healthy()
        await wait_agents(settings.db_url, AGENTS, watch=[fleet])
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            api = Api(http, [m.api for m in managers], fresh_cluster_state)
            ids: list[str] = []
            for i in range(3):
                session, _, _ = await api.create_retrying(_body(f"before-{i}"), api=i)
                ids.append(session["id"])
            note("3 managers and a fleet of 6; 3 sessions created, one through each")
            proxy.blackhole()
            note("manager-cut: every byte to and from Redis held")
            slowest, n = 0.0, 0
            statuses: dict[tuple[int, int], int] = {}
            while time.monotonic() - began < CUT + 5:
                n += 1
                for which in range(3):
                    sent = time.monotonic()
                    status, data = await api.call("POST", "/v2/sessions", _body(f"during-{n}-{which}"), which)
                    slowest = max(slowest, time.monotonic() - sent)
                    statuses[(which, status)] = statuses.get((which, status), 0) + 1
                    assert status in (201, 503), (which, status, data)
                    if status == 201:
                        ids.append(data["id"])
                for m in managers:
                    assert m.failure() is None, m.failure()
                await asyncio.sleep(0.5)
            note(f"creates answered during the cut {statuses}, slowest {slowest:.2f}s")
            proxy.restore()
            note("cut ended")
            wanted = {sid: (lambda s: (s["status"], s["result"]) == DONE) for sid in ids}
            await settle(api, wanted, 120)
            note(f"all {len(ids)} acknowledged sessions ended TERMINATED/SUCCESS")
            assert slowest <= ANSWER_WITHIN, slowest
            assert await _gone_down(settings) == []
            assert await checker.check() == []
            for m in managers:
                assert m.failure() is None, m.failure()
            note("no agent went DOWN; invariants hold; every manager alive")
        print("\n--- one of three managers cut from Redis\n" + "\n".join(history))
    finally:
        await checker.close()
        fleet.stop()
        for m in managers:
            m.stop()
        proxy.close()
