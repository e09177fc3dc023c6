"""Black-box: the `fair_share` scheduler on a real manager and a hollow 2-GPU agent, with a
half-life of 2 s set in etcd (CONTRACT section 16; the issue's "done when").

ann has run the GPUs, ben never has; equal weights. With the cluster full and a session of each
waiting (ann's created first), ben's starts first. Once both usages have decayed (read on
`GET /v2/fair-share`), the same race is won by creation order: ann's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aetcd
import aiohttp
import pytest

from sokovan.common.settings import Settings
from sokovan.harness import truncate_tables
from tests.e2e.cluster import Client, Cluster

GROUP = "fair"
HALF_LIFE = 2.0  # seconds
ENDED = {"TERMINATED", "ERROR", "CANCELLED"}


async def _fair_share_settings(settings: Settings, value: dict[str, Any] | None) -> None:
    etcd = aetcd.Client(host=settings.etcd_host, port=settings.etcd_port)
    key = f"{settings.etcd_prefix}/config/manager/fair_share".encode()
    try:
        if value is None:
            await etcd.delete(key)
        else:
            await etcd.put(key, json.dumps(value).encode())
    finally:
        await etcd.close()


@pytest.fixture(scope="module")
def cluster(
    service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, db_url: str, settings: Settings
) -> Iterator[Cluster]:
    asyncio.run(truncate_tables(db_url))
    asyncio.run(_fair_share_settings(settings, {"half_life_hours": HALF_LIFE / 3600}))
    c = Cluster(service_env, tmp_path_factory.mktemp("fair-share"))
    try:
        c.bootstrap()
        c.start_manager()
        asyncio.run(_create_group(c))
        c.start_agent("fs", "cpu=4,mem=8g", simulate=1, extra=("--scaling-group", GROUP, "--gpus", "2"))
        asyncio.run(c.wait_ready(1))
        yield c
    finally:
        c.stop()
        asyncio.run(_fair_share_settings(settings, None))


async def _create_group(c: Cluster) -> None:
    async with aiohttp.ClientSession() as http:
        body = {"name": GROUP, "scheduler": "fair_share"}
        status, data = await Client(http, c.api, c.token).request("POST", "/v2/scaling-groups", body)
        assert status == 201, data


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _user(admin: Client, name: str) -> Client:
    status, data = await admin.request("POST", "/v2/keypairs", {"user": name, "project": "default"})
    assert status == 201, data
    return Client(admin.http, admin.api, data["token"])


def _whole_agent(command: str = "sleep 3600") -> dict[str, Any]:
    return {
        "image": "python:3",
        "type": "batch",
        "command": command,
        "scaling_group": GROUP,
        "resources": {"cpu": 1, "mem": "1g", "cuda.device": 2},
    }


async def _factors(admin: Client) -> dict[str, float]:
    status, data = await admin.request("GET", "/v2/fair-share")
    assert status == 200, data
    return {i["name"]: i["factor"] for i in data["items"] if i["level"] == "user"}


async def _waiting(client: Client, sid: str) -> None:
    """Until the scheduler has seen the session and left it waiting for room."""
    for _ in range(300):
        session = await client.get(sid)
        assert session["status"] == "PENDING", session
        if session["status_info"].get("pending_reason"):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"session {sid} never told why it waits")


async def _race(admin: Client, first: Client, second: Client) -> str:
    """With the agent full, a session of `first` then one of `second` wait; the agent is freed:
    which of them started ("first" or "second"), the other still waiting. Both are ended after."""
    blocker = await admin.create(**_whole_agent())
    await admin.wait_status(blocker["id"], {"RUNNING"})
    early = (await first.create(**_whole_agent()))["id"]
    late = (await second.create(**_whole_agent()))["id"]
    await _waiting(first, early)
    await _waiting(second, late)
    await admin.request("DELETE", f"/v2/sessions/{blocker['id']}")
    winner = None
    for _ in range(300):
        running = [s for s in (early, late) if (await admin.get(s))["status"] == "RUNNING"]
        if running:
            (winner,) = running
            break
        await asyncio.sleep(0.1)
    assert winner is not None, "neither waiting session started once the agent was free"
    loser = late if winner == early else early
    assert (await admin.get(loser))["status"] == "PENDING"
    for sid in (loser, winner):  # the waiting one first, so that it never takes the agent
        await admin.request("DELETE", f"/v2/sessions/{sid}")
    for sid in (blocker["id"], loser, winner):
        await admin.wait_status(sid, ENDED)
    return "first" if winner == early else "second"


async def test_past_usage_yields_to_none_until_it_has_decayed(
    cluster: Cluster, http: aiohttp.ClientSession
) -> None:
    admin = Client(http, cluster.api, cluster.token)
    ann, ben = await _user(admin, "ann"), await _user(admin, "ben")
    past = await ann.create(**_whole_agent("sleep 4"))  # two half-lives of the whole agent
    await ann.wait_status(past["id"], ENDED, within=30)
    factors = await _factors(admin)
    assert factors["ann"] < 0.9 and "ben" not in factors, factors  # ben has neither run nor waited
    # ann's session is created first, yet ben's starts first
    assert await _race(admin, ann, ben) == "second"

    # Both usages decay (ben's session ran a moment too): until they compare equal...
    for _ in range(400):
        factors = await _factors(admin)
        if round(factors["ann"], 2) == round(factors["ben"], 2) == 1.0:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"the factors never evened out: {factors}")
    # ...and the same race goes by creation order
    assert await _race(admin, ann, ben) == "first"
