"""Create throughput alone: `python -m scripts.bench.creates` (a micro-benchmark of POST /v2/sessions).

A real `sokovan manager --workers N` on a fresh database of its own (`sokovan_bench_creates`, so
that it never touches `make bench`'s), with a small hollow fleet held unschedulable (placement
stays out of the way), and CREATES_N creates from CREATES_CLIENTS keep-alive clients after a
warm-up. Prints creates/s, p50 and p99 as JSON. CREATES_PROFILE=1 records each manager worker
with py-spy during the measured burst (raw stacks in `.dev/bench/profile-<pid>.txt`).
Other knobs: CREATES_AGENTS (20), CREATES_WORKERS (2), CREATES_WARMUP (500), CREATES_ROUNDS (1).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

from scripts.bench.cluster import BenchCluster
from scripts.bench.load import burst, hold_agents


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """User + system CPU time of each of these processes so far (one that ended is left out)."""
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two readings; a process started in between counts from zero."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def processes(cluster: BenchCluster, database: str = "sokovan_bench_creates") -> dict[str, list[int]]:
    """Who shares the CPU during the burst: the manager workers, this load generator, the
    PostgreSQL backends of the bench's database, the hollow fleet."""
    backends = subprocess.run(["pgrep", "-f", f"postgres: .* {database} "], capture_output=True, text=True)
    fleet = subprocess.run(["pgrep", "-f", "sokovan agent --id bench"], capture_output=True, text=True)
    return {
        "manager": cluster.manager_pids(),
        "load_generator": [os.getpid()],
        "postgres": [int(p) for p in backends.stdout.split()],
        "fleet": [int(p) for p in fleet.stdout.split()],
    }


def start_profilers(cluster: BenchCluster) -> list[subprocess.Popen[bytes]]:
    spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    out = []
    for pid in cluster.manager_pids():
        path = cluster.logdir / f"profile-{pid}.txt"
        args = [spy, "record", "-r", "200", "-f", "raw", "-o", str(path), "-p", str(pid)]
        out.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return out


async def main() -> dict[str, Any]:
    n = env_int("CREATES_N", 5000)
    clients = env_int("CREATES_CLIENTS", 64)
    cluster = BenchCluster(
        env_int("CREATES_AGENTS", 20), "cpu=16,mem=64g", workers=os.environ.get("CREATES_WORKERS", "auto")
    )
    server = cluster.env["SOKOVAN_DB_URL"].rsplit("/", 1)[0]
    cluster.env["SOKOVAN_DB_URL"] = f"{server}/sokovan_bench_creates"
    rounds: list[dict[str, Any]] = []
    try:
        await cluster.start()
        assert cluster.engine is not None
        await hold_agents(cluster.engine, held=True)
        await burst(cluster.api, cluster.token, env_int("CREATES_WARMUP", 500), clients, "sleep 3600")
        spies = start_profilers(cluster) if env_int("CREATES_PROFILE", 0) else []
        for _ in range(env_int("CREATES_ROUNDS", 1)):
            before = {k: cpu_seconds(v) for k, v in processes(cluster).items()}
            load = await burst(cluster.api, cluster.token, n, clients, "sleep 3600")
            after = {k: cpu_seconds(v) for k, v in processes(cluster).items()}
            load["cpu_ms_per_create"] = {k: round(cpu_used(before[k], after[k]) * 1000 / n, 3) for k in after}
            rounds.append(load)
        for spy in spies:
            spy.send_signal(2)  # py-spy writes its output on SIGINT
            spy.wait(30)
    finally:
        await cluster.stop()
    return {
        "creates": n,
        "clients": clients,
        "rounds": [
            {
                **{
                    k: round(r[k], 1)
                    for k in ("creates_per_s", "create_p50_ms", "create_p99_ms", "elapsed_s")
                },
                "cpu_ms_per_create": r["cpu_ms_per_create"],
            }
            for r in rounds
        ],
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()), indent=2))
