"""REST load: many concurrent clients creating sessions, and what the history says about them."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

import aiohttp
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def create(http: aiohttp.ClientSession, api: str, token: str, command: str) -> tuple[str, float]:
    body = {"image": "python:3", "type": "batch", "command": command, "resources": {"cpu": 1, "mem": "1g"}}
    start = time.perf_counter()
    async with http.post(
        f"{api}/v2/sessions", json=body, headers={"Authorization": f"Bearer {token}"}
    ) as resp:
        data = await resp.json()
        if resp.status != 201:
            raise RuntimeError(f"create failed: {resp.status} {data}")
    return data["id"], time.perf_counter() - start


async def burst(api: str, token: str, n: int, concurrency: int, command: str) -> dict[str, Any]:
    """n creates from `concurrency` clients as fast as they go."""
    latencies: list[float] = []
    ids: list[str] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def client() -> None:
            while not queue.empty():
                queue.get_nowait()
                sid, took = await create(http, api, token, command)
                ids.append(sid)
                latencies.append(took)

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return {
        "ids": ids,
        "started": start,
        "elapsed_s": elapsed,
        "creates_per_s": n / elapsed,
        "create_p50_ms": pct(latencies, 0.5) * 1000,
        "create_p99_ms": pct(latencies, 0.99) * 1000,
    }


async def steady(api: str, token: str, rate: float, seconds: float, command: str) -> list[str]:
    """Creates at a fixed rate (open loop: a slow answer does not delay the next request)."""
    ids: list[str] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256)) as http:
        start = time.perf_counter()
        tasks = []
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(create(http, api, token, command)))
        for sid, _ in await asyncio.gather(*tasks):
            ids.append(sid)
    return ids


POLL_S = 1.0


async def wait_until(engine: AsyncEngine, ids: list[str], statuses: tuple[str, ...], within: float) -> float:
    """Seconds until every session in `ids` is in one of `statuses`."""
    start = time.perf_counter()
    uuids = [uuid.UUID(i) for i in ids]
    while True:
        async with engine.connect() as conn:
            left = await conn.scalar(
                text("SELECT count(*) FROM sessions WHERE id = ANY(:ids) AND status <> ALL(:st)"),
                {"ids": uuids, "st": list(statuses)},
            )
        if not left:
            return time.perf_counter() - start
        if time.perf_counter() - start > within:
            raise RuntimeError(f"{left} sessions did not reach {statuses} within {within}s")
        # Once a second: the figures come from the history (`milestones`), not from this poll,
        # and on 10,000 ids the count costs PostgreSQL 40-90 ms, which a poll every 0.25 s took
        # from the manager under test (a quarter of a core in the burst).
        await asyncio.sleep(POLL_S)


async def hold_agents(engine: AsyncEngine, held: bool) -> float:
    """Make every agent (un)schedulable; returns the time (epoch seconds) of the change."""
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE agents SET schedulable = :s"), {"s": not held})
        now = await conn.scalar(text("SELECT extract(epoch FROM clock_timestamp())"))
    return float(now)


async def milestones(engine: AsyncEngine, ids: list[str], since: float | None = None) -> dict[str, Any]:
    """From the scheduling history: when each session was created, SCHEDULED and RUNNING.

    Rates count from `since` (e.g. when a held queue was released), else from the first create."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    """
                    SELECT s.id, extract(epoch FROM s.created_at) AS created,
                           extract(epoch FROM min(h.created_at) FILTER (WHERE h.to_status = 'SCHEDULED'))
                               AS scheduled,
                           extract(epoch FROM min(h.created_at) FILTER (WHERE h.to_status = 'RUNNING'))
                               AS running
                    FROM sessions s JOIN session_scheduling_history h ON h.session_id = s.id
                    WHERE s.id = ANY(:ids) GROUP BY s.id, s.created_at
                    """
                ),
                {"ids": [uuid.UUID(i) for i in ids]},
            )
        ).all()
    created = [float(r.created) for r in rows]
    scheduled = [float(r.scheduled) for r in rows if r.scheduled is not None]
    running = [float(r.running) for r in rows if r.running is not None]
    to_running = [float(r.running) - float(r.created) for r in rows if r.running is not None]
    first = since if since is not None else min(created)
    return {
        "count": len(rows),
        "placed_per_s": len(scheduled) / max(1e-9, max(scheduled) - first),
        "running_per_s": len(running) / max(1e-9, max(running) - first),
        "all_running_after_s": max(running) - first,
        "create_to_running_p50_ms": statistics.median(to_running) * 1000,
        "create_to_running_p99_ms": pct(to_running, 0.99) * 1000,
    }
