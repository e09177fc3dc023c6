"""`make bench`: placement and start-up throughput of a real manager against a hollow fleet.

Sizes come from the environment: BENCH_AGENTS (1000), BENCH_SESSIONS (10000), BENCH_CONCURRENCY
(64), BENCH_STEADY_RATE (200), BENCH_STEADY_SECONDS (15), BENCH_LOW_RATE (20: a second, light
steady run; 0 skips it), BENCH_MANAGER_WORKERS (auto: `sokovan manager` as shipped, one worker per
core), BENCH_OBSERVER (1: a `/v2/events` reader and a `GET /v2/agents` poll every second watch every
phase, scripts/bench/observer.py, its page reads' latency also per phase as
`observer_<phase>_agents_get_*`; 0: unwatched), BENCH_REPEAT (3 rounds, each on a fresh cluster;
medians are reported), BENCH_IDLE_SECONDS (60: the manager's CPU at rest with the fleet and the
observer, per minute; 0 skips it), measured after BENCH_IDLE_SETTLE seconds (10: the fleet's
registrations and the observer's first full pages are over; that first stretch is reported on its
own as `settling_manager_cpu_s_per_min`), with every phase but the node-failure one under the
cluster's defaults as shipped (a beat per agent every 10 s): the bench's own node timings (beats
every 2 s, a 6 s timeout) are put in etcd just before that phase,
BENCH_CYCLE (1: also time single cycles), BENCH_DEPLOYMENTS (200; 0 skips the deployments phase),
BENCH_REPLICAS (5 per deployment), BENCH_NODE_FAILURE (100 of the agents killed at once after the
burst; 0 skips the node-failure phase), BENCH_CONTAINERS (1: also the container phase of
scripts/bench/containers.py, create → RUNNING on a real engine, BENCH_CONTAINER_SESSIONS per
round), BENCH_PARTITIONS (1: also the partition and silent-peer scenarios of
scripts/bench/partitions.py at BENCH_PARTITION_S and BENCH_SILENCE_S), BENCH_SERVING (1: also the
serving phase of scripts/bench/serving.py, once per round after the round's cluster is stopped: the
app proxy's throughput and added latency against calling a replica directly;
BENCH_SERVING_CONCURRENCY, BENCH_SERVING_SECONDS). Prints one JSON document
and writes it to .dev/bench/result.json.

Each round: a steady run (with where its time goes: each hop's p50 and each lane's cycles,
scripts/bench/hops.py) (and a light one), each phase also with the CPU each party used per session
(`<phase>_cpu_us_per_session_<manager|postgres|fleet|load_generator>`) and how long the
manager's threads waited for a core (`<phase>_manager_runqueue_wait_s_per_s`), then (on the emptied
cluster, with an app proxy) the deployments phase of scripts/bench/deployments.py, then the burst,
then (with every burst session RUNNING) the node-failure phase of scripts/bench/node_failure.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import create_async_engine

from scripts.bench.cluster import ROOT, BenchCluster, dump, fresh_database, service_env
from scripts.bench.containers import containers_phase
from scripts.bench.creates import cpu_seconds, cpu_used, processes
from scripts.bench.cycle import cycle_cost
from scripts.bench.deployments import HEALTH, deployments_phase
from scripts.bench.hops import LaneCycles, hop_table
from scripts.bench.load import burst, hold_agents, milestones, steady, wait_until
from scripts.bench.node_failure import RETRY_DEFAULT, TIMINGS, node_failure_phase
from scripts.bench.observer import Observer, during
from scripts.bench.partitions import partitions_phase
from scripts.bench.profile import PhaseProfile
from scripts.bench.serving import serving_phase
from scripts.bench.serving import settings as serving_settings
from sokovan.common import eventloop
from sokovan.manager.workers import auto_workers


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def worker_count(workers: str) -> int:
    """How many workers `sokovan manager --workers <workers>` runs here."""
    return auto_workers() if workers == "auto" else int(workers)


class PhaseCPU:
    """The CPU each party (the manager's workers, PostgreSQL's backends of the bench's database,
    the hollow fleet, this load generator) used over a phase, in µs per session of the phase: how
    the work is shared out, which the latencies alone do not say on a machine the parties share.
    Also how long the manager's threads waited for a core, per second of the phase
    (`<phase>_manager_runqueue_wait_s_per_s`, from `/proc/<pid>/task/*/schedstat`): what a busy
    machine adds to every step of theirs."""

    def __init__(self, cluster: BenchCluster) -> None:
        self.cluster = cluster
        self.before: dict[str, dict[int, float]] = {}
        self.waited = 0.0
        self.began = 0.0

    def start(self) -> None:
        self.before = {k: cpu_seconds(v) for k, v in processes(self.cluster, "sokovan_bench").items()}
        self.waited, self.began = runqueue_wait(self.cluster.manager_pids()), time.monotonic()

    def per_session(self, phase: str, sessions: int) -> dict[str, float]:
        after = {k: cpu_seconds(v) for k, v in processes(self.cluster, "sokovan_bench").items()}
        per = 1_000_000 / max(sessions, 1)
        out: dict[str, float] = {
            f"{phase}_cpu_us_per_session_{k}": round(cpu_used(self.before.get(k, {}), t) * per)
            for k, t in after.items()
        }
        waited = runqueue_wait(self.cluster.manager_pids()) - self.waited
        out[f"{phase}_manager_runqueue_wait_s_per_s"] = round(waited / (time.monotonic() - self.began), 3)
        return out


def runqueue_wait(pids: list[int]) -> float:
    """Seconds the threads of these processes have spent runnable but waiting for a core."""
    total = 0
    for pid in pids:
        for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int(stat.read_text().split()[1])
    return total / 1e9


async def one_round(
    agents: int,
    sessions: int,
    concurrency: int,
    rate: int,
    steady_s: int,
    workers: str,
    deployments: tuple[int, int],
    number: int,
    doomed: int,
    low_rate: int = 20,
) -> dict[str, Any]:
    """A fresh database, manager and fleet; a steady run, the deployments phase, then a burst."""
    out: dict[str, Any] = {}
    phases: dict[str, tuple[float, float]] = {}  # wall-clock windows, for the observer's figures
    cluster = BenchCluster(agents, slots="cpu=16,mem=64g", workers=workers, doomed=doomed)
    observer: Observer | None = None
    try:
        await cluster.start(timings=False)  # the idle phase runs under the shipped defaults
        assert cluster.engine is not None
        if os.environ.get("BENCH_OBSERVER", "1") == "1":
            observer = Observer(
                cluster.api, cluster.token, split=os.environ.get("BENCH_OBSERVER_SPLIT", "1") == "1"
            )
            await observer.start()
        idle_s = env_int("BENCH_IDLE_SECONDS", 60)
        if idle_s > 0:  # the fleet registered, nothing else to do: what the manager costs at rest
            pids = cluster.manager_pids()  # every worker (the port shows only those listening yet)
            settle_s = env_int("BENCH_IDLE_SETTLE", 10)
            if settle_s > 0:  # a thousand first beats and the observer's first pages: not rest yet
                before = cpu_seconds(pids)
                await asyncio.sleep(settle_s)
                out["settling_manager_cpu_s_per_min"] = cpu_used(before, cpu_seconds(pids)) * 60 / settle_s
            profile = PhaseProfile("idle")
            profile.start(pids)
            before = cpu_seconds(pids)
            await asyncio.sleep(idle_s)
            out["idle_manager_cpu_s_per_min"] = cpu_used(before, cpu_seconds(pids)) * 60 / idle_s
            out.update(profile.stop())
        # Steady run first, with short sessions, so the burst starts on an empty cluster.
        lanes = LaneCycles(cluster.api, worker_count(workers))
        cpu = PhaseCPU(cluster)
        await lanes.start()
        cpu.start()
        profile = PhaseProfile("steady")
        profile.start(cluster.manager_pids())
        began = time.time()
        ids = await steady(cluster.api, cluster.token, rate, steady_s, "sleep 1")
        phases["steady"] = (began, time.time())
        await wait_until(cluster.engine, ids, ("TERMINATED",), within=300)
        out.update(profile.stop())
        out.update(cpu.per_session("steady", len(ids)))
        out.update({f"steady_{k}": v for k, v in (await lanes.stop()).items()})
        m = await milestones(cluster.engine, ids)
        out["steady_create_to_running_p50_ms"] = m["create_to_running_p50_ms"]
        out["steady_create_to_running_p99_ms"] = m["create_to_running_p99_ms"]
        out.update({f"steady_{k}": v for k, v in (await hop_table(cluster.engine, ids)).items()})
        if low_rate > 0:
            await lanes.start()
            cpu.start()
            profile = PhaseProfile("low_rate")
            profile.start(cluster.manager_pids())
            began = time.time()
            ids = await steady(cluster.api, cluster.token, low_rate, steady_s, "sleep 1")
            phases["low_rate"] = (began, time.time())
            await wait_until(cluster.engine, ids, ("TERMINATED",), within=300)
            out.update(profile.stop())
            out.update(cpu.per_session("low_rate", len(ids)))
            out.update({f"low_rate_{k}": v for k, v in (await lanes.stop()).items()})
            m = await milestones(cluster.engine, ids)
            out["low_rate_create_to_running_p50_ms"] = m["create_to_running_p50_ms"]
            out["low_rate_create_to_running_p99_ms"] = m["create_to_running_p99_ms"]
            out.update({f"low_rate_{k}": v for k, v in (await hop_table(cluster.engine, ids)).items()})
        count, replicas = deployments
        if count > 0:
            out.update(await deployments_phase(cluster, count, replicas, f"r{number}"))
        # Burst: the fleet is held unschedulable while the sessions are created, then released
        # at once, so that placement and start-up are measured on a full queue rather than at
        # the pace of the REST clients.
        await hold_agents(cluster.engine, held=True)
        await lanes.start()
        cpu.start()
        began = time.time()
        load = await burst(cluster.api, cluster.token, sessions, concurrency, "sleep 3600")
        phases["creates"] = (began, time.time())
        out.update(cpu.per_session("creates", sessions))
        out.update({f"creates_{k}": v for k, v in (await lanes.stop()).items()})
        rss = cluster.manager_rss_mib()  # every session PENDING, every agent registered
        await lanes.start()
        cpu.start()
        profile = PhaseProfile("release")
        profile.start(cluster.manager_pids())
        began = time.time()
        released = await hold_agents(cluster.engine, held=False)
        await cluster.hint()
        await wait_until(cluster.engine, load["ids"], ("RUNNING",), within=900)
        phases["release"] = (began, time.time())
        out.update(profile.stop())
        out.update(cpu.per_session("release", sessions))
        out.update({f"release_{k}": v for k, v in (await lanes.stop()).items()})
        m = await milestones(cluster.engine, load["ids"], since=released)
        out.update(
            creates_per_s=load["creates_per_s"],
            create_p50_ms=load["create_p50_ms"],
            create_p99_ms=load["create_p99_ms"],
            placed_per_s=m["placed_per_s"],
            running_per_s=m["running_per_s"],
            all_running_after_release_s=m["all_running_after_s"],
            manager_rss_mib_max_worker=max(rss, default=float("nan")),
        )
        if cluster.doomed is not None:
            await cluster.apply_timings()  # its short timeout and grace, beats every 2 s
            out.update(await node_failure_phase(cluster.engine, cluster.doomed))
    finally:
        if observer is not None:
            seen = await observer.stop()
            out.update({f"observer_{k}": v for k, v in seen.items() if isinstance(v, int | float)})
            for phase, (start, end) in phases.items():
                got = during(seen, start, end)
                out.update({f"observer_{phase}_agents_get_{k}": v for k, v in got.items()})
        await cluster.stop()
    return out


async def main() -> dict[str, Any]:
    agents = env_int("BENCH_AGENTS", 1000)
    sessions = env_int("BENCH_SESSIONS", 10000)
    concurrency = env_int("BENCH_CONCURRENCY", 64)
    rate = env_int("BENCH_STEADY_RATE", 200)
    steady_s = env_int("BENCH_STEADY_SECONDS", 15)
    workers = os.environ.get("BENCH_MANAGER_WORKERS", "auto")
    repeat = env_int("BENCH_REPEAT", 3)
    deployments = (env_int("BENCH_DEPLOYMENTS", 200), env_int("BENCH_REPLICAS", 5))
    doomed = env_int("BENCH_NODE_FAILURE", 100)
    low_rate = env_int("BENCH_LOW_RATE", 20)
    result: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "agents": agents,
        "sessions": sessions,
        "concurrency": concurrency,
        "steady_rate_per_s": rate,
        "low_rate_per_s": low_rate,
        "manager_workers": workers,
        "rounds": repeat,
        "deployments": {"count": deployments[0], "replicas": deployments[1], "health_check": HEALTH},
        "node_failure": {"killed_agents": doomed, "timings": TIMINGS, "retry_default": RETRY_DEFAULT},
    }
    serving = os.environ.get("BENCH_SERVING", "1") == "1"
    if serving:
        result["serving"] = serving_settings()
    rounds = []
    for n in range(repeat):
        rounds.append(
            await one_round(
                agents, sessions, concurrency, rate, steady_s, workers, deployments, n, doomed, low_rate
            )
        )
        if serving:  # needs no manager: after the round's cluster is gone
            rounds[-1].update(await serving_phase(result["serving"]))
    shared = [k for k in rounds[0] if all(k in r for r in rounds)]
    result["median"] = {k: round(statistics.median(r[k] for r in rounds), 1) for k in shared}
    result["each_round"] = [{k: round(v, 1) for k, v in r.items()} for r in rounds]
    if os.environ.get("BENCH_CONTAINERS", "1") == "1":
        result["containers"] = await containers_phase(repeat)
    if os.environ.get("BENCH_PARTITIONS", "1") == "1":
        result.update(await partitions_phase())
    if os.environ.get("BENCH_CYCLE", "1") == "1":
        url = await fresh_database(service_env().get("SOKOVAN_DB_URL", ""), "sokovan_bench_cycle")
        engine = create_async_engine(url)
        result["cycle"] = [await cycle_cost(engine, a, p) for a in (100, 1000) for p in (1000, 10000)]
        await engine.dispose()
    return result


if __name__ == "__main__":
    # The load generator on uvloop, as the daemons run: on asyncio's own loop its 64 clients used
    # twice the CPU on their side of the creates (0.2 against 0.1 ms a create), and its loop's lag
    # counted as the server's (BENCH_UVLOOP=0: as before).
    outcome = eventloop.run(main(), fast=os.environ.get("BENCH_UVLOOP", "1") == "1")
    text = dump(outcome)
    (ROOT / ".dev" / "bench").mkdir(parents=True, exist_ok=True)
    (ROOT / ".dev" / "bench" / "result.json").write_text(text)
    print(text)
