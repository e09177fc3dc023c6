"""The bench's deployments phase: how long until many deployments serve, every replica HEALTHY.

Why this exists: placement and start-up of plain sessions say little about serving, where each
replica also goes through the deployment and route coordinators (a route, its replica session, the
startup grace) and the app proxy's probes before it counts. This phase starts a `sokovan proxy`,
creates `count` custom deployments of `replicas` replicas each over REST at once, and waits until
every one is READY with all its routes HEALTHY; then destroys them all and waits until every
replica session has ended. Timings come from the database's own timestamps (a route's
`status_changed_at` when it turned HEALTHY, history rows), not from the polling interval.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections import Counter
from typing import Any

import aiohttp
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from scripts.bench.cluster import BenchCluster
from scripts.bench.load import pct
from sokovan.common.types import EndpointLifecycle, RouteStatus, SessionStatus

# Probes every second; two passing ones make a route HEALTHY (the contract's defaults are 5 s and 2).
HEALTH = {
    "path": "/health",
    "interval": 1.0,
    "timeout": 1.0,
    "healthy_threshold": 2,
    "unhealthy_threshold": 3,
}
RESOURCES = {"cpu": 1, "mem": "1g"}
CLIENTS = 16
# Statuses enter the SQL as bound parameters, from the enums.
LIVE = sorted(s.value for s in RouteStatus.live())
ENDED_SESSION = sorted(s.value for s in SessionStatus.terminal())
STATUSES = {
    "live": LIVE,
    "healthy": RouteStatus.HEALTHY.value,
    "ready": EndpointLifecycle.READY.value,
    "destroyed": EndpointLifecycle.DESTROYED.value,
    "terminated": RouteStatus.TERMINATED.value,
    "running": SessionStatus.RUNNING.value,
    "ended": ENDED_SESSION,
}

_PROGRESS = """
SELECT d.id, d.status, d.replicas,
       extract(epoch FROM d.created_at) AS created,
       extract(epoch FROM d.status_changed_at) AS changed,
       count(r.id) FILTER (WHERE r.status = ANY(:live)) AS live,
       count(r.id) FILTER (WHERE r.status = :healthy) AS healthy,
       extract(epoch FROM max(r.status_changed_at) FILTER (WHERE r.status = :healthy)) AS healthy_at
FROM deployments d LEFT JOIN routes r ON r.deployment_id = d.id
WHERE d.id = ANY(:ids)
GROUP BY d.id
"""

_ROUTES = "SELECT status, count(*) AS n FROM routes WHERE deployment_id = ANY(:ids) GROUP BY status"
_SESSIONS = "SELECT status, count(*) AS n FROM sessions WHERE deployment_id = ANY(:ids) GROUP BY status"
_LEFT = """
SELECT (SELECT count(*) FROM deployments WHERE id = ANY(:ids) AND status <> :destroyed)
     + (SELECT count(*) FROM routes WHERE deployment_id = ANY(:ids) AND status <> :terminated)
     + (SELECT count(*) FROM sessions WHERE deployment_id = ANY(:ids) AND status <> ALL(:ended))
"""
_RUNNING = """
SELECT extract(epoch FROM max(h.created_at)) FROM (
    SELECT min(h.created_at) AS created_at FROM session_scheduling_history h
    JOIN sessions s ON s.id = h.session_id
    WHERE s.deployment_id = ANY(:ids) AND h.to_status = :running GROUP BY s.id
) h
"""


async def _create_all(api: str, token: str, count: int, replicas: int, round_tag: str) -> list[uuid.UUID]:
    ids: list[uuid.UUID] = []
    names = iter(range(count))
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CLIENTS)) as http:

        async def client() -> None:
            for i in names:
                body = {
                    "name": f"bench-{round_tag}-{i:04d}",
                    "type": "custom",
                    "replicas": replicas,
                    "image": "python:3",
                    "command": "sleep 3600",
                    "resources": RESOURCES,
                    "health_check": HEALTH,
                }
                async with http.post(f"{api}/v2/deployments", json=body, headers=headers) as resp:
                    data = await resp.json()
                    if resp.status != 201:
                        raise RuntimeError(f"deployment create failed: {resp.status} {data}")
                ids.append(uuid.UUID(data["id"]))

        await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return ids


async def _destroy_all(api: str, token: str, ids: list[uuid.UUID]) -> None:
    todo = iter(ids)
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CLIENTS)) as http:

        async def client() -> None:
            for did in todo:
                async with http.delete(f"{api}/v2/deployments/{did}", headers=headers) as resp:
                    if resp.status != 202:
                        raise RuntimeError(f"deployment destroy failed: {resp.status} {await resp.text()}")

        await asyncio.gather(*(client() for _ in range(CLIENTS)))


async def _counts(engine: AsyncEngine, sql: str, ids: list[uuid.UUID]) -> dict[str, int]:
    async with engine.connect() as conn:
        rows = (await conn.execute(text(sql), {"ids": ids})).all()
    return {str(r.status): int(r.n) for r in rows}


async def _where_things_are(engine: AsyncEngine, ids: list[uuid.UUID], rows: list[Any]) -> str:
    deployments = Counter(str(r.status) for r in rows)
    routes = await _counts(engine, _ROUTES, ids)
    sessions = await _counts(engine, _SESSIONS, ids)
    return f"deployments {dict(deployments)}, routes {routes}, replica sessions {sessions}"


async def wait_serving(engine: AsyncEngine, ids: list[uuid.UUID], within: float) -> list[Any]:
    """Until every deployment is READY with exactly its target of live routes, all HEALTHY; the
    progress rows then. RuntimeError after `within` seconds, saying where things stalled."""
    began = time.monotonic()
    while True:
        async with engine.connect() as conn:
            rows = list((await conn.execute(text(_PROGRESS), {"ids": ids, **STATUSES})).all())
        done = [r for r in rows if r.status == STATUSES["ready"] and r.live == r.healthy == r.replicas]
        if len(done) == len(ids):
            return rows
        if time.monotonic() - began > within:
            where = await _where_things_are(engine, ids, rows)
            raise RuntimeError(f"{len(done)}/{len(ids)} deployments serving after {within:.0f}s: {where}")
        await asyncio.sleep(0.25)


async def wait_destroyed(engine: AsyncEngine, ids: list[uuid.UUID], within: float) -> None:
    """Until every deployment is DESTROYED, every route TERMINATED and every replica session ended."""
    began = time.monotonic()
    while True:
        async with engine.connect() as conn:
            left = await conn.scalar(text(_LEFT), {"ids": ids, **STATUSES})
        if not left:
            return
        if time.monotonic() - began > within:
            async with engine.connect() as conn:
                rows = list((await conn.execute(text(_PROGRESS), {"ids": ids, **STATUSES})).all())
            where = await _where_things_are(engine, ids, rows)
            raise RuntimeError(f"deployments not destroyed after {within:.0f}s: {where}")
        await asyncio.sleep(0.25)


async def deployments_phase(
    cluster: BenchCluster, count: int, replicas: int, round_tag: str, within: float = 900
) -> dict[str, float]:
    """Create `count` deployments of `replicas` replicas with a proxy running, until all serve; then destroy
    them. Seconds are counted from just before the first create request."""
    assert cluster.engine is not None
    engine = cluster.engine
    proxy = await asyncio.to_thread(cluster.cluster.start_proxy)
    try:
        start = time.time()
        ids = await _create_all(cluster.api, cluster.token, count, replicas, round_tag)
        created = time.time() - start
        rows = await wait_serving(engine, ids, within)
        async with engine.connect() as conn:
            running = await conn.scalar(text(_RUNNING), {"ids": ids, **STATUSES})
        # A deployment serves from the later of turning READY and its last route turning HEALTHY.
        done = {r.id: max(float(r.changed), float(r.healthy_at or r.changed)) for r in rows}
        per_deployment = [done[r.id] - float(r.created) for r in rows]
        out = {
            "deployments_create_per_s": count / created,
            "deployments_replica_sessions_running_s": float(running) - start if running else 0.0,
            "deployments_all_healthy_s": max(done.values()) - start,
            "deployment_ready_healthy_p50_s": statistics.median(per_deployment),
            "deployment_ready_healthy_p99_s": pct(per_deployment, 0.99),
        }
        began = time.time()
        await _destroy_all(cluster.api, cluster.token, ids)
        await wait_destroyed(engine, ids, within)
        out["deployments_destroyed_s"] = time.time() - began
        return out
    finally:
        await asyncio.to_thread(proxy.stop)
