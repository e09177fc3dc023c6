"""`reserve` against `backfill` on a real manager (issue 37): a hollow fleet of 8-GPU agents, a
steady seeded stream of 1-GPU sessions declaring their run time (enough to keep the fleet about
full) and, every BIG_EVERY seconds, a session asking a whole agent. Each policy runs on a fresh
manager and fleet with the same stream.

Reported per policy: GPU utilization over the stream's window (device-seconds of RUNNING sessions
over the fleet's device-seconds, from each session's RUNNING history row to its end), the whole-agent
sessions started and their longest wait, and under `reserve` how many started later than the
first reservation they showed (plus one placement cycle).

    python -m scripts.bench.reserve       # BENCH_RESERVE_AGENTS (8), BENCH_RESERVE_SECONDS (60)
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import random
import time
from typing import Any

import aiohttp

from scripts.bench.cluster import BenchCluster

PER_AGENT = 8
BIG_EVERY = 15.0
SLACK = dt.timedelta(seconds=3)


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def stream(seconds: float, agents: int, seed: int) -> list[tuple[float, int, int]]:
    """(offset s, devices, declared run time s), seeded: 1-GPU sessions of 5-15 s arriving at
    1.1 x the fleet's devices per mean run time, and a whole-agent one every BIG_EVERY s."""
    rng = random.Random(seed)
    rate = 1.1 * agents * PER_AGENT / 10.0
    out: list[tuple[float, int, int]] = []
    t = 0.0
    while t < seconds:
        out.append((t, 1, rng.randint(5, 15)))
        t += rng.expovariate(rate)
    big = BIG_EVERY / 2
    while big < seconds:
        out.append((big, PER_AGENT, 8))
        big += BIG_EVERY
    return sorted(out)


async def run_policy(policy: str, agents: int, seconds: float, seed: int) -> dict[str, Any]:
    cluster = BenchCluster(agents, slots="cpu=64,mem=512g", fleet_args=("--gpus", str(PER_AGENT)))
    try:
        await cluster.start(timings=False)
        headers = {"Authorization": f"Bearer {cluster.token}"}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32)) as http:
            patch = {"queue_policy": policy}
            async with http.patch(
                f"{cluster.api}/v2/scaling-groups/default", json=patch, headers=headers
            ) as r:
                assert r.status == 200, await r.text()
            created: list[tuple[str, int]] = []
            reservations: dict[str, str] = {}
            began = time.monotonic()

            async def create(devices: int, declared: int) -> None:
                body = {
                    "image": "python:3",
                    "type": "batch",
                    "command": f"sleep {declared - 1}",
                    "max_duration": declared,
                    "resources": {"cpu": 1, "mem": "1g", "cuda.device": devices},
                }
                async with http.post(f"{cluster.api}/v2/sessions", json=body, headers=headers) as resp:
                    data = await resp.json()
                    assert resp.status == 201, data
                    created.append((str(data["id"]), devices))

            async def watch_big() -> None:
                while True:
                    for sid, devices in list(created):
                        if devices < PER_AGENT or sid in reservations:
                            continue
                        async with http.get(f"{cluster.api}/v2/sessions/{sid}", headers=headers) as resp:
                            info = (await resp.json())["status_info"]
                        at = (info.get("reservation") or {}).get("at")
                        if at:
                            reservations[sid] = at
                    await asyncio.sleep(0.5)

            watcher = asyncio.create_task(watch_big())
            for offset, devices, declared in stream(seconds, agents, seed):
                delay = offset - (time.monotonic() - began)
                if delay > 0:
                    await asyncio.sleep(delay)
                await create(devices, declared)
            window_end = dt.datetime.now(dt.UTC)
            await asyncio.sleep(20)  # let the queue drain a little; the window is the stream's
            watcher.cancel()
            rows = []
            for sid, devices in created:
                async with http.get(f"{cluster.api}/v2/sessions/{sid}", headers=headers) as resp:
                    s = await resp.json()
                async with http.get(f"{cluster.api}/v2/sessions/{sid}/history", headers=headers) as resp:
                    h = await resp.json()
                items = h["items"] if isinstance(h, dict) else h
                running = [_time(r["created_at"]) for r in items if r["to_status"] == "RUNNING"]
                ended = _time(s["terminated_at"]) if s.get("terminated_at") else None
                rows.append((sid, devices, _time(s["created_at"]), running[0] if running else None, ended))
        window_start = min(r[2] for r in rows)
        span = (window_end - window_start).total_seconds()
        used = 0.0
        for _, devices, _, start, end in rows:
            if start is None:
                continue
            stop = min(end or window_end, window_end)
            if stop > start:
                used += devices * (stop - max(start, window_start)).total_seconds()
        bigs = [r for r in rows if r[1] == PER_AGENT]
        waits = [((r[3] or window_end) - r[2]).total_seconds() for r in bigs]
        late = [
            r[0]
            for r in bigs
            if r[0] in reservations and (r[3] is None or r[3] > _time(reservations[r[0]]) + SLACK)
        ]
        return {
            "policy": policy,
            "sessions": len(rows),
            "gpu_utilization": round(used / (agents * PER_AGENT * span), 3),
            "whole_agent_sessions": len(bigs),
            "whole_agent_started": sum(1 for r in bigs if r[3] is not None),
            "whole_agent_longest_wait_s": round(max(waits, default=0.0), 1),
            "reserved": len([r for r in bigs if r[0] in reservations]),
            "started_after_reservation": len(late),
            "late_by_s": [
                round(((r[3] or window_end) - _time(reservations[r[0]])).total_seconds(), 1)
                for r in bigs
                if r[0] in late
            ],
        }
    finally:
        await cluster.stop()


async def main_async() -> list[dict[str, Any]]:
    agents = int(os.environ.get("BENCH_RESERVE_AGENTS", 8))
    seconds = float(os.environ.get("BENCH_RESERVE_SECONDS", 60))
    seed = int(os.environ.get("BENCH_SEED", 7))
    return [await run_policy(p, agents, seconds, seed) for p in ("backfill", "reserve")]


def main() -> None:
    print(json.dumps(asyncio.run(main_async()), indent=1))


if __name__ == "__main__":
    main()
