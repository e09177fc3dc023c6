"""The container phase of `make bench`: create → RUNNING of one-kernel sessions whose image the
engine already holds, on a real container agent, split between the engine and the orchestrator.

A fresh database, a plain `sokovan manager` and one `sokovan agent --backend container` on the
engine and registry of .env.services (`make services` starts Podman's API service and a local
registry and builds the default images). One warm-up session makes sure `shell` is held, then
BENCH_CONTAINER_SESSIONS (20) interactive sessions are created one every BENCH_CONTAINER_GAP
seconds (0.5). For each, create → RUNNING comes from its scheduling history; the engine's part is
what the agent logged as `engine_ms` for its kernel (container create + start + inspect); the rest
(admission, placement, the prepare and start lanes, RPC and the event's write) is the orchestrator's.
Without an engine the phase is skipped and says why.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import statistics
from pathlib import Path
from typing import Any

import aiohttp
from sqlalchemy.ext.asyncio import create_async_engine

from scripts.bench.cluster import ROOT, service_env
from scripts.bench.load import milestones, pct, wait_until
from sokovan.harness import LocalCluster, free_port, prepare_database

AGENT = "bench-ctr"


def engine_ms_by_kernel(log: Path) -> dict[str, float]:
    """`engine_ms` of every `kernel.started` line of a JSON agent log, by kernel id."""
    out: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        if '"kernel.started"' not in line:
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "engine_ms" in entry:
            out[str(entry["kernel_id"])] = float(entry["engine_ms"])
    return out


async def _create(http: aiohttp.ClientSession, api: str, token: str) -> str:
    body = {"image": "shell", "type": "interactive", "resources": {"cpu": 0.1, "mem": "32m"}}
    async with http.post(f"{api}/v2/sessions", json=body, headers={"Authorization": f"Bearer {token}"}) as r:
        data = await r.json()
        if r.status != 201:
            raise RuntimeError(f"create failed: {r.status} {data}")
        return str(data["id"])


async def _kernels(http: aiohttp.ClientSession, api: str, token: str, sid: str) -> list[str]:
    async with http.get(f"{api}/v2/sessions/{sid}", headers={"Authorization": f"Bearer {token}"}) as r:
        data = await r.json()
        return [str(k["id"]) for k in data["kernels"]]


async def _end(http: aiohttp.ClientSession, api: str, token: str, ids: list[str]) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    for sid in ids:
        async with http.delete(f"{api}/v2/sessions/{sid}?forced=true", headers=headers):
            pass


async def container_round(sessions: int, gap: float) -> dict[str, Any]:
    base = service_env()
    engine_url, registry = base.get("SOKOVAN_ENGINE"), base.get("SOKOVAN_REGISTRY")
    if not engine_url or not registry:
        return {"skipped": "no SOKOVAN_ENGINE / SOKOVAN_REGISTRY in .env.services (run make services)"}
    server = base.get("SOKOVAN_DB_URL", "postgresql+asyncpg://postgres@127.0.0.1/postgres")
    env = {
        **base,
        "SOKOVAN_DB_URL": f"{server.rsplit('/', 1)[0]}/sokovan_bench_ctr",
        "SOKOVAN_CLUSTER_SECRET": secrets.token_urlsafe(16),
        "SOKOVAN_ETCD_PREFIX": f"sokovan-bench-ctr-{secrets.token_hex(4)}",
        "SOKOVAN_LOG_FORMAT": "json",
    }
    logdir = ROOT / ".dev" / "bench" / "containers"
    logdir.mkdir(parents=True, exist_ok=True)
    (logdir / f"{AGENT}.log").unlink(missing_ok=True)
    await prepare_database(env["SOKOVAN_DB_URL"], fresh=True)
    db = create_async_engine(env["SOKOVAN_DB_URL"], pool_size=2)
    cluster = LocalCluster(env, logdir)
    args = ("--backend", "container", "--engine", engine_url, "--registry", registry, "--kill-grace", "1")
    try:
        token = await asyncio.to_thread(cluster.bootstrap)
        cluster.start_manager()
        cluster.start_agent(AGENT, "cpu=8,mem=8g", rpc_port=free_port(), extra=args)
        await cluster.wait_ready(1, within=60)
        async with aiohttp.ClientSession() as http:
            warm = await _create(http, cluster.api, token)  # pulls `shell` if it is not held yet
            await wait_until(db, [warm], ("RUNNING",), within=120)
            await _end(http, cluster.api, token, [warm])
            ids: list[str] = []
            for _ in range(sessions):
                ids.append(await _create(http, cluster.api, token))
                await asyncio.sleep(gap)
            await wait_until(db, ids, ("RUNNING",), within=120)
            kernels = {sid: await _kernels(http, cluster.api, token, sid) for sid in ids}
            m = await milestones(db, ids)
            await _end(http, cluster.api, token, ids)
            await wait_until(db, ids, ("TERMINATED",), within=120)
        engine_ms = engine_ms_by_kernel(logdir / f"{AGENT}.log")
        per_session = [engine_ms[k[0]] for k in kernels.values() if k and k[0] in engine_ms]
    finally:
        await asyncio.to_thread(cluster.stop, 30)
        await db.dispose()
    total = m["create_to_running_p50_ms"]
    engine = statistics.median(per_session) if per_session else float("nan")
    return {
        "sessions": len(ids),
        "create_to_running_p50_ms": total,
        "create_to_running_p99_ms": m["create_to_running_p99_ms"],
        "engine_p50_ms": engine,
        "engine_p99_ms": pct(per_session, 0.99),
        "orchestrator_p50_ms": total - engine,
    }


async def containers_phase(repeat: int) -> dict[str, Any]:
    sessions = int(os.environ.get("BENCH_CONTAINER_SESSIONS", 20))
    gap = float(os.environ.get("BENCH_CONTAINER_GAP", 0.5))
    rounds = [await container_round(sessions, gap) for _ in range(repeat)]
    if any("skipped" in r for r in rounds):
        return rounds[0]
    return {
        "median": {k: round(statistics.median(r[k] for r in rounds), 1) for k in rounds[0]},
        "each_round": [{k: round(v, 1) for k, v in r.items()} for r in rounds],
    }


if __name__ == "__main__":  # the container phase alone: python -m scripts.bench.containers
    print(json.dumps(asyncio.run(containers_phase(int(os.environ.get("BENCH_REPEAT", 3)))), indent=2))
