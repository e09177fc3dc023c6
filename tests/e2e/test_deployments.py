"""Deployments end to end with real daemons: a manager, two process agents and the app proxy.

Replicas are tiny real HTTP servers (python3's http.server) answering on the PORT their agent gave
them; traffic goes through `sokovan proxy`. Probes are fast here (interval 0.3 s) and the loops'
long cycle is 0.3 s, set in etcd before the manager starts.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aetcd
import aiohttp
import pytest

from sokovan.common.settings import Settings
from sokovan.harness import ProxyProc, truncate_tables
from tests.e2e.cluster import Client, Cluster

SERVER = """
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        bad = self.path == "/health" and os.environ.get("FAIL_HEALTH")
        body = os.environ["SOKOVAN_KERNEL_ID"].encode()
        self.send_response(500 if bad else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"""
# The server runs as a child of the kernel's shell, which stays: killing the server leaves the
# replica running but unhealthy (the probes find out), as a hung or crashed server inside a live
# container would.
COMMAND = 'python3 -c "$SERVER"; sleep 3600'
HEALTH = {
    "path": "/health",
    "interval": 0.3,
    "timeout": 0.5,
    "healthy_threshold": 2,
    "unhealthy_threshold": 3,
}
FAST = {"long_cycle_interval": 0.3}


@pytest.fixture(scope="module")
def serving(
    service_env: dict[str, str], settings: Settings, tmp_path_factory: pytest.TempPathFactory, db_url: str
) -> Iterator[Cluster]:
    asyncio.run(truncate_tables(db_url))
    asyncio.run(_loops(settings, FAST))
    workdir: Path = tmp_path_factory.mktemp("serving")
    c = Cluster(service_env, workdir)
    try:
        c.bootstrap()
        c.start_manager()
        c.start_agent("serve-agent-1", "cpu=8,mem=4g")
        c.start_agent("serve-agent-2", "cpu=8,mem=4g")
        c.start_proxy()
        asyncio.run(c.wait_ready(2))
        yield c
    finally:
        c.stop()
        asyncio.run(_loops(settings, None))


async def _loops(settings: Settings, value: dict[str, float] | None) -> None:
    etcd = aetcd.Client(host=settings.etcd_host, port=settings.etcd_port)
    key = f"{settings.etcd_prefix}/config/manager/loops".encode()
    try:
        if value is None:
            await etcd.delete(key)
        else:
            await etcd.put(key, json.dumps(value).encode())
    finally:
        await etcd.close()


@pytest.fixture
async def api(serving: Cluster) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as http:
        yield Client(http, serving.api, serving.token)


def proxy_of(cluster: Cluster) -> ProxyProc:
    assert cluster.proxy is not None
    return cluster.proxy


async def create(api: Client, name: str, replicas: int, **extra: Any) -> dict[str, Any]:
    body = {
        "name": name,
        "type": "custom",
        "replicas": replicas,
        "image": "python:3",
        "command": COMMAND,
        "environ": {"SERVER": SERVER},
        "resources": {"cpu": 0.5, "mem": "64m"},
        "health_check": HEALTH,
        # open to anyone through the proxy unless a test is about the access token
        "open_to_public": True,
        **extra,
    }
    status, data = await api.request("POST", "/v2/deployments", body)
    assert status == 201, data
    return data  # type: ignore[no-any-return]


async def deployment(api: Client, did: str) -> dict[str, Any]:
    status, data = await api.request("GET", f"/v2/deployments/{did}")
    assert status == 200, data
    return data  # type: ignore[no-any-return]


async def routes(api: Client, did: str) -> list[dict[str, Any]]:
    status, data = await api.request("GET", f"/v2/deployments/{did}/routes?limit=500")
    assert status == 200, data
    return data["items"]  # type: ignore[no-any-return]


async def eventually(check: Any, what: str, within: float = 60) -> Any:
    deadline = asyncio.get_running_loop().time() + within
    last: Any = None
    while asyncio.get_running_loop().time() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what}: not within {within} s (last: {last})")


async def serving_healthy(api: Client, did: str, n: int, within: float = 60) -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]] | None:
        d = await deployment(api, did)
        live = [r for r in await routes(api, did) if r["status"] not in ("TERMINATED",)]
        healthy = [r for r in live if r["status"] == "HEALTHY"]
        ok = d["status"] == "READY" and d["ready_replicas"] == n and len(healthy) == n == len(live)
        return healthy if ok else None

    return await eventually(check, f"{n} HEALTHY replicas", within)  # type: ignore[no-any-return]


async def live_replica_sessions(api: Client, did: str) -> int:
    count = 0
    for r in await routes(api, did):
        if r["session_id"] is None:
            continue
        session = await api.get(r["session_id"])
        count += session["status"] not in ("TERMINATED", "ERROR", "CANCELLED")
    return count


def pid_of_kernel_server(kernel_id: str) -> int:
    """The pid of the python server this test's agent started for `kernel_id`."""
    marker = f"SOKOVAN_KERNEL_ID={kernel_id}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            marker in environ
            and len(args) > 1
            and b"python" in Path(args[0].decode()).name.encode()
            and args[1] == b"-c"
        ):
            return int(proc.name)
    raise AssertionError(f"no server process for kernel {kernel_id}")


async def test_three_replicas_serve_through_the_proxy_and_a_killed_server_is_replaced(
    api: Client, serving: Cluster
) -> None:
    d = await create(api, "echo", 3, open_to_public=False)
    healthy = await serving_healthy(api, d["id"], 3)
    proxy = proxy_of(serving)
    kernels = set()
    for r in healthy:
        session = await api.get(r["session_id"])
        kernels.add(session["kernels"][0]["id"])
    seen: set[str] = set()
    # the deployment's access token, answered once at creation, on every request through the proxy
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {d['token']}"}) as http:
        for _ in range(30):
            async with http.get(f"{proxy.url}/echo/anything") as resp:
                assert resp.status == 200
                seen.add(await resp.text())
        assert seen == kernels  # round robin reached every replica

        # Kill one replica's server while a client keeps sending GETs through the proxy.
        victim = healthy[0]
        victim_kernel = (await api.get(victim["session_id"]))["kernels"][0]["id"]
        statuses: list[int] = []
        stop = asyncio.Event()

        async def client() -> None:
            while not stop.is_set():
                async with http.get(f"{proxy.url}/echo/x") as resp:
                    statuses.append(resp.status)
                await asyncio.sleep(0.02)

        async def victim_route() -> dict[str, Any] | None:
            found = [r for r in await routes(api, d["id"]) if r["id"] == victim["id"]]
            return found[0] if found and found[0]["status"] in ("TERMINATING", "TERMINATED") else None

        task = asyncio.create_task(client())
        try:
            os.kill(pid_of_kernel_server(victim_kernel), signal.SIGKILL)
            await eventually(victim_route, "the killed replica's route evicted")
            await serving_healthy(api, d["id"], 3)
        finally:
            stop.set()
            await task
    assert statuses and all(s < 500 for s in statuses), sorted(set(statuses))
    status, history = await api.request("GET", f"/v2/routes/{victim['id']}/history")
    assert status == 200
    path = [h["to_status"] for h in history["items"]]
    assert "UNHEALTHY" in path and "TERMINATING" in path, path
    assert await live_replica_sessions(api, d["id"]) == 3


async def test_scaling_follows_the_target(api: Client) -> None:
    d = await create(api, "scaler", 3)
    await serving_healthy(api, d["id"], 3)
    for target in (5, 1, 0, 2):
        status, _ = await api.request("PATCH", f"/v2/deployments/{d['id']}", {"replicas": target})
        assert status == 200
        if target:
            await serving_healthy(api, d["id"], target)

        async def settled(t: int = target) -> bool:
            return await live_replica_sessions(api, d["id"]) == t

        await eventually(settled, f"{target} live replica sessions")


async def test_a_command_that_exits_at_once_fails_to_start_and_is_replaced_with_backoff(api: Client) -> None:
    d = await create(api, "broken", 1, command="exit 1")

    async def backing_off() -> dict[str, Any] | None:
        info = (await deployment(api, d["id"]))["status_info"]
        return info if info.get("backoff_until") else None

    info = await eventually(backing_off, "replacement backing off", within=90)
    assert info["backoff_until"]
    failed = [r for r in await routes(api, d["id"])]
    status, history = await api.request("GET", f"/v2/routes/{failed[0]['id']}/history")
    path = [h["to_status"] for h in history["items"]]
    assert path[:4] == ["PROVISIONING", "FAILED_TO_START", "TERMINATING", "TERMINATED"], path
    status, _ = await api.request("DELETE", f"/v2/deployments/{d['id']}")
    assert status == 202


async def test_proxy_down_degrades_without_eviction_and_destroy_frees_the_name(
    api: Client, serving: Cluster
) -> None:
    d = await create(api, "steady", 2)
    before = {r["id"] for r in await serving_healthy(api, d["id"], 2)}
    proxy = proxy_of(serving)
    proxy.stop()
    try:

        async def degraded() -> bool:
            rs = [r for r in await routes(api, d["id"]) if r["id"] in before]
            return all(r["status"] == "DEGRADED" for r in rs)

        await eventually(degraded, "routes DEGRADED while no proxy probes", within=30)
        assert {r["id"] for r in await routes(api, d["id"]) if r["status"] != "TERMINATED"} == before
    finally:
        proxy.start()
        proxy.wait_up()
    assert {r["id"] for r in await serving_healthy(api, d["id"], 2)} == before  # the same replicas

    status, _ = await api.request("DELETE", f"/v2/deployments/{d['id']}")
    assert status == 202

    async def destroyed() -> bool:
        gone = (await deployment(api, d["id"]))["status"] == "DESTROYED"
        ended = all(r["status"] == "TERMINATED" for r in await routes(api, d["id"]))
        return gone and ended and await live_replica_sessions(api, d["id"]) == 0

    await eventually(destroyed, "deployment destroyed")
    again = await create(api, "steady", 0)  # the name is free again
    assert again["id"] != d["id"]


async def test_a_server_failing_its_health_check_stays_out_of_the_table_and_is_replaced(
    api: Client, serving: Cluster
) -> None:
    d = await create(api, "sick", 1, environ={"SERVER": SERVER, "FAIL_HEALTH": "1"})
    first: dict[str, Any] = {}

    async def evicted() -> bool:
        rs = await routes(api, d["id"])
        if rs and not first:
            first.update(rs[0])
        return any(r["id"] == first.get("id") and r["status"] in ("TERMINATING", "TERMINATED") for r in rs)

    await eventually(evicted, "the unhealthy replica evicted")
    status, history = await api.request("GET", f"/v2/routes/{first['id']}/history")
    path = [h["to_status"] for h in history["items"]]
    assert "HEALTHY" not in path and "UNHEALTHY" in path, path
    assert (await deployment(api, d["id"]))["ready_replicas"] == 0

    async def replaced() -> bool:
        return any(r["id"] != first["id"] for r in await routes(api, d["id"]))

    await eventually(replaced, "a replacement replica")
    async with aiohttp.ClientSession() as http, http.get(f"{proxy_of(serving).url}/sick/") as resp:
        assert resp.status == 503  # never in the routing table
        assert resp.headers["Content-Type"].startswith("application/problem+json")
    status, _ = await api.request("DELETE", f"/v2/deployments/{d['id']}")
    assert status == 202
