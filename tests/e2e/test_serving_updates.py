"""Serving for real (CONTRACT section 12), end to end with real daemons: a manager, two process
agents and the app proxy; replicas are small real HTTP servers.

Health: `initial_delay` counts from the replica's RUNNING, and an UNHEALTHY route that recovers
within its eviction grace is HEALTHY again without being replaced. Updates: a rolling and a
blue-green update under a steady client load through the proxy lose no request; an update that
never gets healthy rolls back by itself while the old revision keeps serving. Autoscaling: load
scales a deployment up, idleness to zero, and a request at zero is held and answered. The proxy
refuses a request without the deployment's token.

Probes are fast here (interval 0.3 s) and the loops' long cycle is 0.3 s, set in etcd before the
manager starts.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sokovan.common.settings import Settings
from sokovan.harness import truncate_tables
from tests.e2e.cluster import Client, Cluster
from tests.e2e.test_deployments import FAST, _loops, deployment, eventually, routes

# GET /health: 200 once HEALTH_AFTER seconds have passed since the server started, 500 while the
# file named by FAIL_FILE exists; GET /work?ms=N answers after N ms with the VERSION it runs.
SERVER = """
import http.server, os, time, urllib.parse
START = time.time()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        if url.path == "/health":
            late = time.time() - START < float(os.environ.get("HEALTH_AFTER", "0"))
            bad = late or os.path.exists(os.environ.get("FAIL_FILE", "/nonexistent"))
            self.reply(500 if bad else 200, b"health")
            return
        ms = int(urllib.parse.parse_qs(url.query).get("ms", ["0"])[0])
        time.sleep(ms / 1000)
        self.reply(200, os.environ.get("VERSION", "1").encode())
    def reply(self, code, body):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"""
COMMAND = 'exec python3 -c "$SERVER"'
HEALTH = {
    "path": "/health",
    "interval": 0.3,
    "timeout": 0.5,
    "healthy_threshold": 2,
    "unhealthy_threshold": 2,
}


@pytest.fixture(scope="module")
def serving(
    service_env: dict[str, str], settings: Settings, tmp_path_factory: pytest.TempPathFactory, db_url: str
) -> Iterator[Cluster]:
    asyncio.run(truncate_tables(db_url))
    asyncio.run(_loops(settings, FAST))
    c = Cluster(service_env, tmp_path_factory.mktemp("serving-updates"))
    try:
        c.bootstrap()
        c.start_manager()
        c.start_agent("upd-agent-1", "cpu=4,mem=4g")
        c.start_agent("upd-agent-2", "cpu=4,mem=4g")
        c.start_proxy()
        asyncio.run(c.wait_ready(2))
        yield c
    finally:
        c.stop()
        asyncio.run(_loops(settings, None))


@pytest.fixture
async def api(serving: Cluster) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as http:
        yield Client(http, serving.api, serving.token)


def proxy_url(cluster: Cluster) -> str:
    assert cluster.proxy is not None
    return cluster.proxy.url


async def create(
    api: Client, name: str, replicas: int, environ: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    body = {
        "name": name,
        "type": "custom",
        "replicas": replicas,
        "image": "python:3",
        "command": COMMAND,
        "environ": {"SERVER": SERVER, **(environ or {})},
        "resources": {"cpu": 0.25, "mem": "64m"},
        "health_check": HEALTH,
        "open_to_public": True,
        **extra,
    }
    status, data = await api.request("POST", "/v2/deployments", body)
    assert status == 201, data
    return data  # type: ignore[no-any-return]


async def history(api: Client, path: str) -> list[dict[str, Any]]:
    status, data = await api.request("GET", f"{path}/history?limit=500")
    assert status == 200, data
    return data["items"]  # type: ignore[no-any-return]


async def ready(
    api: Client, did: str, n: int, revision: int | None = None, within: float = 90
) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        d = await deployment(api, did)
        ok = d["status"] == "READY" and d["ready_replicas"] == n
        return d if ok and (revision is None or d["revision"] == revision) else None

    return await eventually(check, f"READY with {n} HEALTHY replicas (revision {revision})", within)  # type: ignore[no-any-return]


async def destroy(api: Client, did: str) -> None:
    status, _ = await api.request("DELETE", f"/v2/deployments/{did}")
    assert status == 202


class Load:
    """`clients` loops sending GET /<name>/work?ms=20 through the proxy; every answer recorded."""

    def __init__(self, url: str, name: str, clients: int = 8) -> None:
        self.url, self.name, self.clients = url, name, clients
        self.answers: list[tuple[int, str]] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Load:
        self._http = aiohttp.ClientSession()
        self._tasks = [asyncio.create_task(self._client()) for _ in range(self.clients)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        await self._http.close()

    async def _client(self) -> None:
        while not self._stop.is_set():
            try:
                async with self._http.get(f"{self.url}/{self.name}/work?ms=20") as resp:
                    self.answers.append((resp.status, await resp.text()))
            except aiohttp.ClientError as exc:
                self.answers.append((0, repr(exc)))

    def failed(self) -> list[tuple[int, str]]:
        return [a for a in self.answers if a[0] != 200]

    def versions_since(self, start: int) -> set[str]:
        return {body for status, body in self.answers[start:] if status == 200}


async def test_initial_delay_counts_from_running_not_from_the_route(api: Client, serving: Cluster) -> None:
    # Room for nothing else: the replica waits PENDING longer than its initial delay.
    blockers = [
        await api.create(image="python:3", command="sleep 600", resources={"cpu": 4, "mem": "64m"})
        for _ in range(2)
    ]
    for b in blockers:
        await api.wait_status(b["id"], {"RUNNING"})
    slow = {**HEALTH, "initial_delay": 3.0, "unhealthy_threshold": 1}
    d = await create(api, "slowstart", 1, {"HEALTH_AFTER": "2"}, health_check=slow)
    await asyncio.sleep(4)  # past the initial delay counted from the route's creation
    for b in blockers:
        status, _ = await api.request("DELETE", f"/v2/sessions/{b['id']}")
        assert status in (200, 202, 204)
    await ready(api, d["id"], 1)
    (route,) = [r for r in await routes(api, d["id"]) if r["status"] != "TERMINATED"]
    path = [h["to_status"] for h in await history(api, f"/v2/routes/{route['id']}")]
    assert "UNHEALTHY" not in path and path[-1] == "HEALTHY", path
    await destroy(api, d["id"])


async def test_an_unhealthy_replica_that_recovers_within_its_grace_is_not_replaced(
    api: Client, serving: Cluster
) -> None:
    # Where the kernel (under a uid of its own) can see the file: pytest's tmp_path is root's only.
    shared = tempfile.mkdtemp(prefix="sokovan-wobbly-")
    os.chmod(shared, 0o755)
    flag = Path(shared) / "fail"
    check = {**HEALTH, "eviction_grace": 8.0}
    d = await create(api, "wobbly", 1, {"FAIL_FILE": str(flag)}, health_check=check)
    await ready(api, d["id"], 1)
    (before,) = [r for r in await routes(api, d["id"]) if r["status"] == "HEALTHY"]
    flag.touch()

    async def unhealthy() -> bool:
        return [r["status"] for r in await routes(api, d["id"]) if r["id"] == before["id"]] == ["UNHEALTHY"]

    await eventually(unhealthy, "the failing replica UNHEALTHY", within=20)

    async def degraded() -> bool:
        got = await deployment(api, d["id"])
        return got["status"] == "DEGRADED" and got["status_info"].get("healthy_replicas") == 0

    await eventually(degraded, "the deployment DEGRADED", within=10)
    flag.unlink()
    after = await ready(api, d["id"], 1, within=20)
    assert after["ready_replicas"] == 1
    live = [r for r in await routes(api, d["id"]) if r["status"] != "TERMINATED"]
    assert [(r["id"], r["session_id"]) for r in live] == [(before["id"], before["session_id"])]
    path = [h["to_status"] for h in await history(api, f"/v2/routes/{before['id']}")]
    assert path[-2:] == ["UNHEALTHY", "HEALTHY"] and "TERMINATING" not in path, path
    await destroy(api, d["id"])
    os.rmdir(shared)


@pytest.mark.parametrize(
    "strategy", [{"type": "rolling", "max_surge": 1, "max_unavailable": 0}, {"type": "blue_green"}]
)
async def test_an_update_under_load_loses_no_request(
    api: Client, serving: Cluster, strategy: dict[str, Any]
) -> None:
    name = f"upd-{strategy['type'].replace('_', '')}"
    d = await create(api, name, 2, {"VERSION": "1"})
    await ready(api, d["id"], 2, revision=1)
    async with Load(proxy_url(serving), name) as load:
        await asyncio.sleep(1)
        body = {"environ": {"SERVER": SERVER, "VERSION": "2"}, "strategy": strategy}
        status, updated = await api.request("PATCH", f"/v2/deployments/{d['id']}", body)
        assert status == 202, updated
        assert updated["revision"] == 2 and updated["status"] == "DEPLOYING"
        done = await ready(api, d["id"], 2, revision=2)
        assert done["rollout"] is None
        mark = len(load.answers)
        await asyncio.sleep(1.5)
        latest = load.versions_since(mark)
    assert load.answers and not load.failed(), load.failed()[:5]
    assert latest == {"2"}  # the new revision serves all traffic
    live = [r for r in await routes(api, d["id"]) if r["status"] != "TERMINATED"]
    assert sorted(r["revision"] for r in live) == [2, 2]
    await destroy(api, d["id"])


async def test_an_update_that_never_gets_healthy_rolls_back_while_the_old_revision_serves(
    api: Client, serving: Cluster
) -> None:
    d = await create(api, "doomed", 2, {"VERSION": "1"})
    await ready(api, d["id"], 2, revision=1)
    async with Load(proxy_url(serving), "doomed", clients=4) as load:
        body = {"command": "sleep 600", "rollback_after": 4}  # never answers its health path
        status, updated = await api.request("PATCH", f"/v2/deployments/{d['id']}", body)
        assert status == 202, updated
        back = await ready(api, d["id"], 2, revision=1, within=60)
        assert back["rollout"] is None
    assert load.answers and not load.failed(), load.failed()[:5]
    assert {body for _, body in load.answers} == {"1"}
    messages = " ".join(h.get("message") or "" for h in await history(api, f"/v2/deployments/{d['id']}"))
    assert "rolled back" in messages
    await destroy(api, d["id"])


async def test_autoscaling_follows_load_down_to_zero_and_a_request_at_zero_is_held(
    api: Client, serving: Cluster
) -> None:
    rules = {
        "metric": "inflight",
        "target": 1,
        "min_replicas": 0,
        "max_replicas": 3,
        "scale_up_cooldown": 1,
        "scale_down_cooldown": 2,
        "scale_to_zero_after": 3,
    }
    d = await create(api, "elastic", 1, autoscaling=rules)
    await ready(api, d["id"], 1)
    url = f"{proxy_url(serving)}/elastic/work?ms=1500"
    async with aiohttp.ClientSession() as http:

        async def one() -> int:
            async with http.get(url) as resp:
                await resp.read()
                return resp.status

        async def busy(stop: asyncio.Event) -> None:
            while not stop.is_set():
                await one()

        stop = asyncio.Event()
        workers = [asyncio.create_task(busy(stop)) for _ in range(3)]
        try:

            async def grown() -> bool:
                return (await deployment(api, d["id"]))["replicas"] >= 2

            await eventually(grown, "scaled up under load", within=30)
        finally:
            stop.set()
            await asyncio.gather(*workers)

        async def zero() -> bool:
            got = await deployment(api, d["id"])
            return got["replicas"] == 0 and got["ready_replicas"] == 0

        await eventually(zero, "scaled to zero once idle", within=60)
        started = time.monotonic()
        assert await one() == 200  # held while a replica starts, then answered
        assert time.monotonic() - started < 60
    rows = await history(api, f"/v2/deployments/{d['id']}")
    decisions = [h["message"] for h in rows if h["handler"] == "AutoscaleDeployment"]
    assert any("inflight" in m for m in decisions) and any("held" in m for m in decisions), decisions
    status, _ = await api.request("PATCH", f"/v2/deployments/{d['id']}", {"replicas": 2})
    assert status == 409  # the autoscaler owns the replicas
    await destroy(api, d["id"])


async def test_a_deployment_with_a_token_refuses_a_request_without_it(api: Client, serving: Cluster) -> None:
    d = await create(api, "private", 1, open_to_public=False)
    token = d["token"]
    await ready(api, d["id"], 1)
    url = f"{proxy_url(serving)}/private/work"
    async with aiohttp.ClientSession() as http:
        async with http.get(url) as resp:
            assert resp.status == 401
            assert resp.headers["Content-Type"].startswith("application/problem+json")
        async with http.get(url, headers={"Authorization": "Bearer wrong"}) as resp:
            assert resp.status == 401
        async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as resp:
            assert resp.status == 200
    assert "token" not in await deployment(api, d["id"])  # shown once, at creation
    await destroy(api, d["id"])
