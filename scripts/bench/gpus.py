"""The GPU placement check at scale (issue 36): a fresh manager and a hollow fleet whose agents
have 8 GPUs each (`sokovan agent --simulate N --gpus 8`), SESSIONS sessions asking 1, 2, 4 or 8
devices (seeded), created over REST v2; once every session is RUNNING or PENDING with a reason,
every kernel's `devices` are read back over REST and checked: as many as asked, all its agent's,
none given twice, no agent past 8; the waiting ones name `cuda.device`.

    python -m scripts.bench.gpus          # BENCH_GPU_AGENTS (250), BENCH_GPU_SESSIONS (2000)

Prints one JSON document (placed, waiting, devices given, seconds to settle, violations).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import Any

import aiohttp

from scripts.bench.cluster import BenchCluster

PER_AGENT = 8
ASKS = (1, 2, 4, 8)


async def _get_all(
    http: aiohttp.ClientSession, api: str, headers: dict[str, str], ids: list[str]
) -> list[Any]:
    sem = asyncio.Semaphore(16)

    async def one(sid: str) -> Any:
        async with sem, http.get(f"{api}/v2/sessions/{sid}", headers=headers) as resp:
            return await resp.json()

    return list(await asyncio.gather(*(one(s) for s in ids)))


async def gpu_phase(agents: int, sessions: int, seed: int = 7) -> dict[str, Any]:
    cluster = BenchCluster(
        agents, slots=f"cpu={PER_AGENT * 4},mem=512g", fleet_args=("--gpus", str(PER_AGENT))
    )
    try:
        await cluster.start(timings=False)
        rng = random.Random(seed)
        asks = [rng.choice(ASKS) for _ in range(sessions)]
        headers = {"Authorization": f"Bearer {cluster.token}"}
        began = time.monotonic()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32)) as http:
            sem = asyncio.Semaphore(32)

            async def create(n: int) -> str:
                body = {
                    "image": "python:3",
                    "type": "batch",
                    "command": "sleep 3600",
                    "resources": {"cpu": 1, "mem": "1g", "cuda.device": n},
                }
                async with sem, http.post(f"{cluster.api}/v2/sessions", json=body, headers=headers) as resp:
                    data = await resp.json()
                    assert resp.status == 201, data
                    return str(data["id"])

            ids = list(await asyncio.gather(*(create(n) for n in asks)))
            while True:
                got = await _get_all(http, cluster.api, headers, ids)
                waiting = [s for s in got if s["status"] == "PENDING"]
                if all(s["status"] == "RUNNING" or s["status_info"].get("pending_reason") for s in got):
                    break
                if time.monotonic() - began > 600:
                    raise RuntimeError("not settled within 600 s")
                await asyncio.sleep(2)
        settled = time.monotonic() - began
        violations: list[str] = []
        given: dict[str, str] = {}
        per_agent: dict[str, int] = {}
        for ask, s in zip(asks, got, strict=True):
            if s["status"] != "RUNNING":
                if "cuda.device" not in s["status_info"]["pending_reason"]:
                    violations.append(f"{s['id']} waits without naming cuda.device")
                continue
            kernel = s["kernels"][0]
            if len(kernel["devices"]) != ask:
                violations.append(f"{s['id']} asked {ask}, got {kernel['devices']}")
            for device in kernel["devices"]:
                if not device.startswith(f"GPU-hollow-{kernel['agent_id']}-"):
                    violations.append(f"{s['id']} on {kernel['agent_id']} got {device}")
                if device in given:
                    violations.append(f"{device} given to {given[device]} and {s['id']}")
                given[device] = s["id"]
            per_agent[kernel["agent_id"]] = per_agent.get(kernel["agent_id"], 0) + ask
        violations += [f"{a} holds {n} devices" for a, n in per_agent.items() if n > PER_AGENT]
        return {
            "agents": agents,
            "devices": agents * PER_AGENT,
            "sessions": sessions,
            "asked_devices": sum(asks),
            "running": sessions - len(waiting),
            "waiting": len(waiting),
            "devices_given": len(given),
            "settled_s": round(settled, 1),
            "violations": violations[:20],
            "violation_count": len(violations),
        }
    finally:
        await cluster.stop()


def main() -> None:
    agents = int(os.environ.get("BENCH_GPU_AGENTS", 250))
    sessions = int(os.environ.get("BENCH_GPU_SESSIONS", 2000))
    print(json.dumps(asyncio.run(gpu_phase(agents, sessions)), indent=1))


if __name__ == "__main__":
    main()
