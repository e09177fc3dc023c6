"""Issue 11 with real daemons: one owner cannot starve another in the placement window, a session's
max_session_lifetime ends it, and retention prunes old terminal rows while the cluster runs.

One manager and one process agent (cpu=4) serve the module, on empty tables with the harness's
fast timings (long cycle 0.5 s). Everything is seen as a client sees it (REST v2, /metrics, etcd
for the settings); the database is read only to count audit rows.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aetcd
import aiohttp
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import create_async_engine

from sokovan.common.settings import Settings
from sokovan.db.models import AuditLog
from sokovan.harness import LocalCluster, check_alive
from tests.fault.harness import TERMINAL, clear_timings, put_config, reset_cluster_state

T = TypeVar("T")
RESOURCES = {"cpu": 1, "mem": "64m"}
OWN_SECTIONS = ("placement_window", "retention")


@pytest.fixture(scope="module")
def cluster(
    settings: Settings, service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    asyncio.run(reset_cluster_state(settings))
    workdir: Path = tmp_path_factory.mktemp("hardening")
    c = LocalCluster(service_env, workdir, agent_args=("--kill-grace", "2", "--heartbeat-interval", "0.5"))
    try:
        c.bootstrap()
        c.start_manager()
        c.start_agent("fair-agent", "cpu=4,mem=4g")
        asyncio.run(c.wait_ready(1))
        yield c
    finally:
        c.stop()
        asyncio.run(_forget_settings(settings))
        asyncio.run(clear_timings(settings))


async def _forget_settings(settings: Settings) -> None:
    etcd = aetcd.Client(host=settings.etcd_host, port=settings.etcd_port)
    try:
        for section in OWN_SECTIONS:
            await etcd.delete(f"{settings.etcd_prefix}/config/manager/{section}".encode())
    finally:
        await etcd.close()


@dataclass
class Client:
    http: aiohttp.ClientSession
    api: str
    token: str

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.http.request(method, f"{self.api}{path}", json=body, headers=headers) as resp:
            raw = await resp.text()
            return resp.status, (json.loads(raw) if raw else None)

    async def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        got, data = await self.call(method, path, body)
        assert got == status, f"{method} {path} {body}: {got} {data}"
        return data

    async def create(self, command: str = "sleep 3600", **fields: Any) -> str:
        body = {"image": "shell", "type": "batch", "command": command, "resources": RESOURCES, **fields}
        data = await self.ok("POST", "/v2/sessions", body, status=201)
        return str(data["id"])

    async def session(self, sid: str) -> dict[str, Any]:
        data: dict[str, Any] = await self.ok("GET", f"/v2/sessions/{sid}")
        return data

    async def user(self, name: str, policy: str | None = None) -> Client:
        body: dict[str, Any] = {"user": name, "project": "default", "role": "user"}
        if policy is not None:
            body["resource_policy"] = policy
        keys = await self.ok("POST", "/v2/keypairs", body, status=201)
        return Client(self.http, self.api, keys["token"])


@pytest.fixture
async def admin(cluster: LocalCluster) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as http:
        yield Client(http, cluster.api, cluster.token)


async def until(
    cluster: LocalCluster,
    probe: Callable[[], Awaitable[T]],
    ok: Callable[[T], bool],
    what: str,
    within: float,
) -> T:
    began = time.monotonic()
    while True:
        value = await probe()
        if ok(value):
            return value
        cluster.check_alive()
        if time.monotonic() - began > within:
            raise AssertionError(f"{what}: not within {within}s; last seen: {value}")
        await asyncio.sleep(0.2)


async def test_max_session_lifetime_ends_a_running_session(cluster: LocalCluster, admin: Client) -> None:
    await admin.ok("PUT", "/v2/resource-policies/short-lived", {"max_session_lifetime": 2})
    user = await admin.user("lifer", "short-lived")
    # A retry policy that would retry any retryable failure: LIFETIME_EXCEEDED is not one.
    sid = await user.create("sleep 3600", retry_policy={"max_retries": 2, "retry_delay": 1, "jitter": "none"})
    await until(cluster, lambda: user.session(sid), lambda s: s["status"] == "RUNNING", "running", 30)
    ended = await until(cluster, lambda: user.session(sid), lambda s: s["status"] in TERMINAL, "ended", 20)
    info = ended["status_info"]
    assert (ended["status"], ended["result"], info["cause"]) == ("ERROR", "FAILURE", "LIFETIME_EXCEEDED")
    assert info["message"] == "ran longer than max_session_lifetime (2 s)"
    assert {k["status"] for k in ended["kernels"]} == {"TERMINATED"}
    history = (await user.ok("GET", f"/v2/sessions/{sid}/history?limit=100"))["items"]
    assert any(h["handler"] == "EnforceLifetime" and h["to_status"] == "TERMINATING" for h in history), (
        history
    )
    # Never retried: the decision says so and no second session appears.
    decided = await until(
        cluster, lambda: user.session(sid), lambda s: "retry" in s["status_info"], "retry decision", 10
    )
    assert decided["status_info"]["retry"]["decision"] == "ineligible"
    await asyncio.sleep(2)  # more than the retry delay: a retry would exist by now
    assert [s["id"] for s in (await user.ok("GET", "/v2/sessions"))["items"]] == [sid]


async def test_one_owners_queue_does_not_starve_another(
    cluster: LocalCluster, admin: Client, settings: Settings
) -> None:
    """A's 60 sessions waiting on a dependency and 60 too big to place now, against a window of
    20 with 5 per owner (the defaults are 5,000 and 500): B's session is placed at once."""
    await put_config(settings, "placement_window", {"limit": 20, "per_owner": 5})
    alice = await admin.user("alice")
    bob = await admin.user("bob")
    dep = await alice.create("sleep 3600")
    await until(
        cluster, lambda: alice.session(dep), lambda s: s["status"] == "RUNNING", "dependency running", 30
    )
    blocked = [await alice.create("true", depends_on=[dep]) for _ in range(60)]
    too_big = [await alice.create("true", resources={"cpu": 4, "mem": "64m"}) for _ in range(60)]
    sid = await bob.create("sleep 3600")
    placed = await until(
        cluster,
        lambda: bob.session(sid),
        lambda s: s["status"] not in {"PENDING"},
        "bob's session placed",
        10,
    )
    assert placed["status"] not in TERMINAL, placed
    # A's sessions still wait, each with its reason.
    waiting = [await alice.session(s) for s in (blocked[0], blocked[-1], too_big[0], too_big[-1])]
    assert {s["status"] for s in waiting} == {"PENDING"}
    # A's dependency ends other than in success: every session waiting on it is cancelled.
    await alice.ok("DELETE", f"/v2/sessions/{dep}?forced=true", status=202)

    async def statuses() -> set[str]:
        return {(await alice.session(s))["status"] for s in blocked}

    await until(cluster, statuses, lambda got: got == {"CANCELLED"}, "dependents cancelled", 30)
    cause = (await alice.session(blocked[-1]))["status_info"]["cause"]
    assert cause == "DEPENDENCY_FAILED"
    for s in [*too_big, sid]:
        await admin.ok("DELETE", f"/v2/sessions/{s}", status=202)


async def test_retention_prunes_old_terminal_sessions_while_the_cluster_runs(
    cluster: LocalCluster, admin: Client, settings: Settings
) -> None:
    engine = create_async_engine(settings.db_url)
    try:
        quick = [await admin.create("true") for _ in range(12)]
        live = await admin.create("sleep 3600")
        for sid in quick:
            await until(
                cluster, lambda sid=sid: admin.session(sid), lambda s: s["status"] in TERMINAL, "ended", 30
            )
        async with engine.connect() as conn:
            audit = await conn.scalar(select(func.count()).select_from(AuditLog))
        assert audit
        # 0.0001 days: 8.64 s. Fractions are read live from etcd.
        await put_config(settings, "retention", {"retention_days": 0.0001})

        async def gone() -> int:
            return sum([(await admin.call("GET", f"/v2/sessions/{s}"))[0] == 404 for s in quick])

        await until(cluster, gone, lambda n: n == len(quick), "ended sessions pruned", 60)
        assert (await admin.session(live))["status"] == "RUNNING"
        async with engine.connect() as conn:
            assert await conn.scalar(select(func.count()).select_from(AuditLog)) >= audit  # kept
        async with aiohttp.ClientSession() as http, http.get(f"{cluster.api}/metrics") as resp:
            metrics = await resp.text()
        removed = [
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith('sokovan_retention_removed_total{kind="session"}')
        ]
        assert removed and removed[0] >= len(quick), removed
        check_alive(cluster.daemons)
        await admin.ok("DELETE", f"/v2/sessions/{live}", status=202)
    finally:
        await engine.dispose()
