"""PostgreSQL, Redis and etcd taken away from running daemons, then given back.

Each service is reached through an `OutageProxy` the test controls: `cut()` resets every live
connection and refuses new ones, as a stopped (or restarting) service would, without touching the
machine's shared services. While a service is away no daemon exits, a create is answered 201 or
503 (never a 500), and once it is back every acknowledged session ends as it should (short batch
sessions, TERMINATED/SUCCESS), none stuck. A manager that cannot go on exits non-zero, saying why.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import create_async_engine

from sokovan.bus.streams import stream_key
from sokovan.common.settings import Settings
from sokovan.db.models import AgentHistory
from sokovan.harness import ManagerProc, wait_agents
from tests.fault.harness import AgentProc, Api, put_config, settle
from tests.fault.outage_proxy import OutageProxy, target_of, via

AGENTS = 4
BATCH = 3  # sessions created before and after an outage
SETTLE = 120.0
RESOURCES = {"cpu": 1, "mem": "256m"}
DONE = ("TERMINATED", "SUCCESS")


@dataclass
class Cluster:
    proxies: dict[str, OutageProxy]
    manager: ManagerProc
    fleet: AgentProc
    api: Api

    def assert_alive(self) -> None:
        for daemon in (self.manager, self.fleet):
            assert daemon.failure() is None, daemon.failure()


@pytest.fixture
async def cluster(
    fresh_cluster_state: str, service_env: dict[str, str], settings: Settings, tmp_path: Path
) -> AsyncIterator[Cluster]:
    proxies = {
        "postgres": OutageProxy(target_of(settings.db_url)).start(),
        "redis": OutageProxy(target_of(settings.redis_url)).start(),
        "etcd": OutageProxy(target_of(settings.etcd)).start(),
    }
    env = {
        **service_env,
        "SOKOVAN_DB_URL": via(settings.db_url, proxies["postgres"]),
        "SOKOVAN_REDIS_URL": via(settings.redis_url, proxies["redis"]),
        "SOKOVAN_ETCD": proxies["etcd"].address,
    }
    manager = ManagerProc(env, tmp_path)
    fleet = AgentProc(env, tmp_path, "outage", "cpu=8,mem=16g", simulate=AGENTS)
    try:
        manager.start()
        await manager.wait_healthy()
        await wait_agents(settings.db_url, AGENTS, watch=[fleet])
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            yield Cluster(proxies, manager, fleet, Api(http, [manager.api], fresh_cluster_state))
    finally:
        fleet.stop()
        manager.stop()
        for proxy in proxies.values():
            proxy.close()


def _body(tag: str) -> dict[str, Any]:
    return {
        "name": f"outage-{tag}",
        "image": "shell",
        "type": "batch",
        "command": "sleep 1",
        "resources": RESOURCES,
        "creation_id": f"outage-{tag}-{uuid.uuid4().hex[:8]}",
    }


async def _create_until_acknowledged(api: Api, tag: str, within: float = 60, patient: bool = False) -> str:
    """POST until a 201/200 (503s retried with the same creation_id); never a 500. `patient`: a
    request that outlives the client's timeout is retried too, as a client would."""
    body = _body(tag)
    deadline = time.monotonic() + within
    while True:
        try:
            status, data = await api.call("POST", "/v2/sessions", body)
        except TimeoutError:
            assert patient and time.monotonic() < deadline, f"{tag}: no answer within the client's timeout"
            continue
        if status in (200, 201):
            return str(data["id"])
        assert status == 503, (status, data)
        assert time.monotonic() < deadline, f"{tag}: still 503 after {within}s"
        await asyncio.sleep(0.5)


async def _create_during(cluster: Cluster, seconds: float) -> tuple[list[str], dict[int, int]]:
    """One create a second for `seconds`: the ids acknowledged, and how many of each status."""
    acknowledged: list[str] = []
    statuses: dict[int, int] = {}
    began = time.monotonic()
    n = 0
    while time.monotonic() - began < seconds:
        n += 1
        try:
            async with cluster.api.http.post(
                f"{cluster.manager.api}/v2/sessions", json=_body(f"during-{n}"), headers=cluster.api.headers
            ) as resp:
                status = resp.status
                data = await resp.json(content_type=None)
                if status == 503:
                    assert resp.headers["Content-Type"].startswith("application/problem+json"), data
                    assert int(resp.headers["Retry-After"]) > 0
        except TimeoutError:
            status, data = -1, None  # a request that outlived the client's timeout: not acknowledged
        assert status in (-1, 201, 503), (status, data)
        statuses[status] = statuses.get(status, 0) + 1
        if status == 201:
            acknowledged.append(str(data["id"]))
        cluster.assert_alive()
        await asyncio.sleep(1.0)
    return acknowledged, statuses


async def _ride_out(cluster: Cluster, service: str, seconds: float) -> dict[int, int]:
    """Sessions before, during and after `service` is away for `seconds`: all end as they should."""
    before = [await _create_until_acknowledged(cluster.api, f"before-{i}") for i in range(BATCH)]
    cluster.proxies[service].cut()
    during, statuses = await _create_during(cluster, seconds)
    cluster.proxies[service].restore()
    after = [await _create_until_acknowledged(cluster.api, f"after-{i}") for i in range(BATCH)]
    wanted = {sid: (lambda s: (s["status"], s["result"]) == DONE) for sid in [*before, *during, *after]}
    await settle(cluster.api, wanted, SETTLE)
    cluster.assert_alive()
    print(f"\n{service} away {seconds:.0f}s: creates answered {statuses}; {len(wanted)} sessions ended")
    return statuses


async def test_redis_away_for_20s(cluster: Cluster, settings: Settings) -> None:
    statuses = await _ride_out(cluster, "redis", 20)
    assert 500 not in statuses
    assert await _gone_down(settings) == []


async def test_postgres_restarts(cluster: Cluster, settings: Settings) -> None:
    statuses = await _ride_out(cluster, "postgres", 15)
    assert statuses.get(503, 0) > 0, statuses  # every create needs the database
    # The beats sent while the database was away never reached it; that silence was the
    # manager's, and no agent is DOWN for it (not even one whose first beat after came late).
    assert await _gone_down(settings) == []


async def test_etcd_away_and_config_resumes(cluster: Cluster, settings: Settings) -> None:
    path = "/v2/config/node-lifecycle"
    cluster.proxies["etcd"].cut()
    # Written to etcd itself while the manager cannot see it: taken up when etcd is back.
    await put_config(settings, "node_lifecycle", {**_lifecycle(), "heartbeat_timeout": 3.5})
    await asyncio.sleep(5)
    status, data = await cluster.api.call("GET", path)
    assert (status, data["heartbeat_timeout"]) == (200, 3.0)
    cluster.proxies["etcd"].restore()
    await _until(cluster.api, path, lambda d: d["heartbeat_timeout"] == 3.5, "the change made while away")
    statuses = await _ride_out(cluster, "etcd", 15)
    assert statuses.get(201, 0) > 0, statuses  # creates need no etcd
    await put_config(settings, "node_lifecycle", {**_lifecycle(), "heartbeat_timeout": 4.0})
    await _until(cluster.api, path, lambda d: d["heartbeat_timeout"] == 4.0, "a change after restore")


# A silent peer: packets dropped, not refused (the proxy holds every byte, both ways).
# A few seconds in `make test`; `make bench` (or SOKOVAN_SILENCE_S=60) holds it for the minute.
SILENCE = float(os.environ.get("SOKOVAN_SILENCE_S", "12"))
ANSWER_WITHIN = 5.0  # contract section 13: 503 within 5 s, never a hang


async def _silent_for(cluster: Cluster, service: str, seconds: float) -> dict[int, int]:
    """Creates once a second while `service` is silent: each answered (201 or 503) within
    ANSWER_WITHIN; then everything acknowledged before, during and after ends as it should."""
    before = [await _create_until_acknowledged(cluster.api, f"before-{i}") for i in range(BATCH)]
    cluster.proxies[service].blackhole()
    acknowledged: list[str] = []
    statuses: dict[int, int] = {}
    slowest = 0.0
    began = time.monotonic()
    n = 0
    while time.monotonic() - began < seconds:
        n += 1
        sent = time.monotonic()
        try:
            status, data = await cluster.api.call("POST", "/v2/sessions", _body(f"silent-{n}"))
        except TimeoutError:
            raise AssertionError(f"a create hung past the client's 10 s on a silent {service}") from None
        slowest = max(slowest, time.monotonic() - sent)
        assert status in (201, 503), (status, data)
        statuses[status] = statuses.get(status, 0) + 1
        if status == 201:
            acknowledged.append(str(data["id"]))
        cluster.assert_alive()
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - sent)))
    cluster.proxies[service].restore()
    restored = time.monotonic()
    after = [await _create_until_acknowledged(cluster.api, f"after-{i}", within=15) for i in range(BATCH)]
    resumed = time.monotonic() - restored
    wanted = {sid: (lambda s: (s["status"], s["result"]) == DONE) for sid in [*before, *acknowledged, *after]}
    await settle(cluster.api, wanted, SETTLE)
    cluster.assert_alive()
    print(
        f"\n{service} silent {seconds:.0f}s: creates answered {statuses}, slowest {slowest:.2f}s;"
        f" creates acknowledged again {resumed:.1f}s after; {len(wanted)} sessions ended"
    )
    assert slowest <= ANSWER_WITHIN, f"a create waited {slowest:.1f}s on a silent {service}"
    return statuses


async def test_silent_redis(cluster: Cluster, settings: Settings) -> None:
    await _silent_for(cluster, "redis", SILENCE)
    assert await _gone_down(settings) == []


async def test_silent_postgres(cluster: Cluster, settings: Settings) -> None:
    statuses = await _silent_for(cluster, "postgres", SILENCE)
    assert statuses.get(503, 0) > 0, statuses  # every create needs the database
    assert await _gone_down(settings) == []


async def test_silent_etcd(cluster: Cluster, settings: Settings) -> None:
    statuses = await _silent_for(cluster, "etcd", SILENCE)
    assert statuses.get(201, 0) > 0, statuses  # creates need no etcd
    assert await _gone_down(settings) == []


@pytest.mark.parametrize("service", ["redis", "postgres"])
async def test_stranded_connections_are_given_up(cluster: Cluster, settings: Settings, service: str) -> None:
    """Every live connection to the service goes silent for good while new ones work: the daemons
    give up the silent ones (per-call timeouts) and go on with new ones, instead of waiting for
    TCP (about 15 minutes)."""
    before = [await _create_until_acknowledged(cluster.api, f"before-{i}") for i in range(BATCH)]
    cluster.proxies[service].strand()
    began = time.monotonic()
    # A request that drew a stranded connection from the pool waits for the statement timeout
    # (the peer itself answers the manager's probes): the client retries it, as after a 503.
    after = [
        await _create_until_acknowledged(cluster.api, f"stranded-{i}", within=120, patient=True)
        for i in range(BATCH)
    ]
    wanted = {sid: (lambda s: (s["status"], s["result"]) == DONE) for sid in [*before, *after]}
    await settle(cluster.api, wanted, 90)
    cluster.assert_alive()
    took = time.monotonic() - began
    print(f"\n{service} connections stranded: {len(wanted)} sessions ended {took:.1f}s after")
    assert await _gone_down(settings) == []


async def _gone_down(settings: Settings) -> list[str]:
    """The agents declared DOWN since the cluster was set up."""
    engine = create_async_engine(settings.db_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(select(AgentHistory.agent_id).where(AgentHistory.to_status == "DOWN"))
            return [r.agent_id for r in rows]
    finally:
        await engine.dispose()


def _lifecycle() -> dict[str, Any]:
    from tests.fault.harness import NODE_LIFECYCLE

    return dict(NODE_LIFECYCLE)


async def _until(api: Api, path: str, ok: Any, what: str, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while True:
        status, data = await api.call("GET", path)
        if status == 200 and ok(data):
            return
        assert time.monotonic() < deadline, f"{what}: not applied within {within}s: {data}"
        await asyncio.sleep(0.5)


STREAMS = 200


async def test_200_event_streams_from_one_keypair(cluster: Cluster) -> None:
    """Past 16 a keypair's streams get 429; the manager keeps serving and placing meanwhile, and
    once the streams are closed a new one is accepted."""
    url = f"{cluster.manager.api}/v2/events"
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as http:
        responses = await asyncio.gather(
            *(http.get(url, headers=cluster.api.headers) for _ in range(STREAMS))
        )
        try:
            statuses = sorted(r.status for r in responses)
            assert statuses == [200] * 16 + [429] * (STREAMS - 16)
            refused = [r for r in responses if r.status == 429]
            assert all(r.headers["Content-Type"].startswith("application/problem+json") for r in refused)
            for r in refused:
                r.close()
            # The manager serves and places meanwhile.
            serving = {**_body("while-streaming"), "command": "serve"}
            status, created = await cluster.api.call("POST", "/v2/sessions", serving)
            assert status == 201, created
            await settle(cluster.api, {created["id"]: lambda s: s["status"] == "RUNNING"}, 60, poll=0.5)
            assert cluster.manager.healthy()
        finally:
            for r in responses:
                r.close()
        for _ in range(100):  # each handler notices its client left within a second
            again = await http.get(url, headers=cluster.api.headers)
            again.close()
            if again.status == 200:
                break
            assert again.status == 429
            await asyncio.sleep(0.2)
        assert again.status == 200, "the closed streams' places were never freed"
    cluster.assert_alive()


def test_manager_exits_non_zero_when_it_cannot_start(service_env: dict[str, str], tmp_path: Path) -> None:
    """A database that does not exist is no outage to wait out: exit 1 with one line saying so."""
    url = service_env["SOKOVAN_DB_URL"].rpartition("/")[0] + f"/sokovan_missing_{uuid.uuid4().hex[:8]}"
    manager = ManagerProc({**service_env, "SOKOVAN_DB_URL": url}, tmp_path)
    manager.start()
    try:
        code = manager.wait(60)
    except subprocess.TimeoutExpired:
        manager.kill()
        raise
    last = manager.log_text().strip().splitlines()[-1]
    assert code == 1, manager.log_tail()
    assert last.startswith("Error: the manager stopped: cannot start: postgres:"), last
    assert "does not exist" in last


async def test_manager_exits_non_zero_when_a_background_task_cannot_go_on(
    fresh_cluster_state: str, service_env: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    """The event stream's key overwritten with a string (no outage: Redis answers WRONGTYPE every
    time): the event consumer is restarted a few times, then the manager stops with exit 1."""
    manager = ManagerProc(service_env, tmp_path)
    manager.start()
    redis = aioredis.Redis.from_url(settings.redis_url)
    try:
        await manager.wait_healthy()
        key = stream_key(settings.etcd_prefix)
        async with redis.pipeline(transaction=True) as pipe:
            await pipe.delete(key).set(key, "not a stream").execute()
        code = await asyncio.to_thread(manager.wait, 60)
    finally:
        await redis.delete(stream_key(settings.etcd_prefix))
        await redis.aclose()
        if manager.running:
            manager.kill()
    last = manager.log_text().strip().splitlines()[-1]
    assert code == 1, manager.log_tail()
    assert last.startswith("Error: the manager stopped: event-consumer failed 5 times in a row:"), last
    assert "WRONGTYPE" in last
    assert "task.restarting" in manager.log_text()
