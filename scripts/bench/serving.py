"""The bench's serving phase: what the app proxy costs a request, against calling the replica directly.

Why this exists: the deployments phase says how soon replicas serve, not what going through
`sokovan proxy` costs each request once they do. This phase needs no manager and no fleet:

- **The replica** is a tiny aiohttp server in a process of its own (`python -m scripts.bench.serving
  replica`, on uvloop like the proxy), answering `GET /work` at once with a 3-byte body.
- **The proxy** is a real `sokovan proxy` process (the harness' `ProxyProc`), with a cluster secret
  and a Redis key prefix of its own. Its routing table is published straight to Redis with
  `publish_table`: one deployment `bench` → the replica's endpoint, with a `DeploymentEntry` that
  has an access token, so the token check is part of what is measured (every request through the
  proxy carries `Authorization: Bearer <token>`). Limits (`max_connections`, `--max-per-client`) are
  set well above the load. The proxy keeps the last table (and re-reads it every second, as it does
  in a cluster), so the table is published once.
- **The load** is one process (`python -m scripts.bench.serving load`) pinned to one CPU: an aiohttp
  client (on uvloop) in a closed loop at BENCH_SERVING_CONCURRENCY (32) requests in flight, for
  BENCH_SERVING_WARMUP (2) seconds unmeasured and then BENCH_SERVING_SECONDS (10) measured; first
  against the replica directly, then through the proxy (`/bench/work`), same generator, same
  settings; then both again with one request in flight for BENCH_SERVING_SINGLE_SECONDS (3; 0
  skips it): the hop's own cost, without the queueing that 32 in flight add. A latency is one
  request's, sent → body read; requests/s counts the 200s that completed in the measured window;
  anything else (another status, a connection error) is an error.
- **Pinning**: the load generator gets the first CPU this process may use; the replica and the proxy
  get the last one (on three or more CPUs, the proxy gets a third of its own). On a 2-core machine
  the proxy and the replica therefore share one core, so through the proxy the server side does
  its work and the proxy's on the same core the replica alone had when called directly: the cost
  measured is the proxy's CPU as well as its added hop.

`serving_phase()` returns one round's numbers (`serving_direct_*`, `serving_proxy_*`, the proxy's
added p50/p99 and its throughput ratio); `make bench` runs it once per round, outside the
hollow-fleet cluster (BENCH_SERVING=0 skips it). `python -m scripts.bench.serving` runs
BENCH_REPEAT (3) rounds of this phase alone and prints medians, spreads and every round as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from aiohttp import web

from scripts.bench.cluster import ROOT, service_env
from scripts.bench.load import pct
from sokovan.bus.routing import DeploymentEntry, RoutingTable, publish_table
from sokovan.common.eventloop import loop_factory
from sokovan.harness import ProxyProc, free_port

BODY = b"ok\n"
DEPLOYMENT = "bench"
MODULE = [sys.executable, "-m", "scripts.bench.serving"]


def settings() -> dict[str, Any]:
    """The phase's knobs, from the environment, and the CPUs each process is pinned to."""
    cpus = sorted(os.sched_getaffinity(0))
    load_cpu, replica_cpu = cpus[0], cpus[-1]
    proxy_cpu = cpus[1] if len(cpus) >= 3 else replica_cpu
    return {
        "concurrency": int(os.environ.get("BENCH_SERVING_CONCURRENCY", 32)),
        "seconds": float(os.environ.get("BENCH_SERVING_SECONDS", 10)),
        "warmup_s": float(os.environ.get("BENCH_SERVING_WARMUP", 2)),
        "single_seconds": float(os.environ.get("BENCH_SERVING_SINGLE_SECONDS", 3)),
        "cpus": {"load": load_cpu, "replica": replica_cpu, "proxy": proxy_cpu},
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time process `pid` has used so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin(pid: int, cpu: int) -> None:
    """Every thread of process `pid` onto `cpu` (threads it starts later inherit it)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, {cpu})
        except OSError:
            pass  # a thread that ended meanwhile


# --- the replica (a process of its own) --------------------------------------------------------


async def _serve_replica(port: int) -> None:
    async def work(_: web.Request) -> web.Response:
        return web.Response(body=BODY, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/work", work)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()  # until killed


# --- the load generator (a process of its own) ---------------------------------------------------


async def generate(
    url: str, concurrency: int, seconds: float, warmup: float, token: str | None
) -> dict[str, Any]:
    """A closed loop of `concurrency` clients GETting `url` for `warmup` + `seconds`; what the
    measured `seconds` saw (requests/s, latency percentiles in ms, errors by kind)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    total = 0  # every answer, the warm-up's included (for CPU per request)
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as http:
        began = time.perf_counter()
        measure_from, end = began + warmup, began + warmup + seconds

        async def client() -> None:
            nonlocal total
            while (sent := time.perf_counter()) < end:
                try:
                    async with http.get(url, headers=headers) as resp:
                        await resp.read()
                        outcome = "ok" if resp.status == 200 else str(resp.status)
                except (aiohttp.ClientError, OSError) as exc:
                    outcome = type(exc).__name__
                done = time.perf_counter()
                total += 1
                if measure_from <= sent and done <= end:
                    if outcome == "ok":
                        latencies.append(done - sent)
                    else:
                        errors[outcome] += 1

        await asyncio.gather(*(client() for _ in range(concurrency)))
    ms = [x * 1000 for x in latencies]
    return {
        "requests": len(ms),
        "rps": len(ms) / seconds,
        "p50_ms": statistics.median(ms) if ms else float("nan"),
        "p99_ms": pct(ms, 0.99),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "total": total,
    }


async def _run_load(url: str, concurrency: int, seconds: float, warmup: float, token: str | None) -> None:
    print(json.dumps(await generate(url, concurrency, seconds, warmup, token)), flush=True)


# --- the phase ---------------------------------------------------------------------------------


def start_replica(port: int, cpu: int, log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [*MODULE, "replica", "--port", str(port), "--cpu", str(cpu)], cwd=ROOT, stdout=log, stderr=log
        )


async def _answers(url: str, headers: dict[str, str], within: float) -> None:
    """Until GET `url` answers 200; RuntimeError after `within` seconds, with the last answer."""
    began, last = time.monotonic(), "nothing"
    async with aiohttp.ClientSession() as http:
        while time.monotonic() - began < within:
            try:
                async with http.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                    last = f"{resp.status} {(await resp.text())[:200]}"
                    if resp.status == 200:
                        return
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                last = repr(exc)
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not answer 200 within {within:.0f}s: {last}")


async def _load(
    url: str, token: str | None, knobs: dict[str, Any], concurrency: int, seconds: float
) -> dict[str, Any]:
    """One run of the load generator, in its own process on the load CPU."""
    args = [
        *MODULE,
        "load",
        url,
        "--concurrency",
        str(concurrency),
        "--seconds",
        str(seconds),
        "--warmup",
        str(knobs["warmup_s"]),
        "--cpu",
        str(knobs["cpus"]["load"]),
    ]
    env = {**os.environ, "BENCH_SERVING_TOKEN": token or ""}  # not on the command line
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"load generator exited with {proc.returncode}: {err.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def serving_phase(knobs: dict[str, Any] | None = None) -> dict[str, float]:
    """One round: a replica, a proxy in front of it, the load directly and then through the proxy."""
    knobs = knobs or settings()
    cpus = knobs["cpus"]
    logdir = ROOT / ".dev" / "bench" / "serving"
    logdir.mkdir(parents=True, exist_ok=True)
    (logdir / "proxy.log").unlink(missing_ok=True)
    base = service_env()
    secret, prefix = secrets.token_urlsafe(16), f"sokovan-bench-serving-{secrets.token_hex(4)}"
    env = {
        **base,
        "SOKOVAN_CLUSTER_SECRET": secret,
        "SOKOVAN_ETCD_PREFIX": prefix,
        "SOKOVAN_LOG_FORMAT": "json",
    }
    env.pop("SOKOVAN_DB_URL", None)  # the proxy needs none
    token = secrets.token_urlsafe(24)
    port = free_port()
    replica_url = f"http://127.0.0.1:{port}"
    replica = start_replica(port, cpus["replica"], logdir / "replica.log")
    concurrency = int(knobs["concurrency"])
    proxy = ProxyProc(env, logdir)
    proxy.args += ["--max-per-client", str(max(64, 2 * concurrency))]
    client = aioredis.Redis.from_url(base.get("SOKOVAN_REDIS_URL", "redis://127.0.0.1:6379/0"))
    try:
        await _answers(f"{replica_url}/work", {}, within=30)
        proxy.start()
        assert proxy.proc is not None
        pin(proxy.proc.pid, cpus["proxy"])
        await asyncio.to_thread(proxy.wait_up, 30)
        pin(proxy.proc.pid, cpus["proxy"])  # threads started while it came up
        table = RoutingTable(
            generated_at=time.time(),
            routes={DEPLOYMENT: [replica_url]},
            deployments={
                DEPLOYMENT: DeploymentEntry(
                    id=uuid.uuid4(),
                    token_sha256=hashlib.sha256(token.encode()).hexdigest(),
                    replicas=1,
                    max_connections=max(256, 4 * concurrency),
                )
            },
        )
        await publish_table(client, prefix, secret, table)
        through = f"{proxy.url}/{DEPLOYMENT}/work"
        await _answers(through, {"Authorization": f"Bearer {token}"}, within=30)
        seconds, single = float(knobs["seconds"]), float(knobs["single_seconds"])
        before = cpu_seconds(replica.pid)
        direct = await _load(f"{replica_url}/work", None, knobs, concurrency, seconds)
        replica_cpu = (cpu_seconds(replica.pid) - before) / max(1, direct["total"])
        before = cpu_seconds(proxy.proc.pid)
        proxied = await _load(through, token, knobs, concurrency, seconds)
        proxy_cpu = (cpu_seconds(proxy.proc.pid) - before) / max(1, proxied["total"])
        if single > 0:  # one request at a time: the hop itself, without queueing
            direct1 = await _load(f"{replica_url}/work", None, knobs, 1, single)
            proxied1 = await _load(through, token, knobs, 1, single)
        if proxy.failure() is not None:
            raise RuntimeError(f"the proxy exited during the phase: {proxy.failure()}")
    finally:
        await asyncio.to_thread(proxy.stop, 10)
        replica.kill()
        replica.wait(10)
        await client.delete(f"{prefix}:routing:table")
        await client.aclose()
    out = {
        "serving_direct_rps": direct["rps"],
        "serving_proxy_rps": proxied["rps"],
        "serving_proxy_rps_ratio": proxied["rps"] / direct["rps"] if direct["rps"] else float("nan"),
        "serving_direct_p50_ms": direct["p50_ms"],
        "serving_direct_p99_ms": direct["p99_ms"],
        "serving_proxy_p50_ms": proxied["p50_ms"],
        "serving_proxy_p99_ms": proxied["p99_ms"],
        "serving_proxy_added_p50_ms": proxied["p50_ms"] - direct["p50_ms"],
        "serving_proxy_added_p99_ms": proxied["p99_ms"] - direct["p99_ms"],
        "serving_direct_errors": direct["errors"],
        "serving_proxy_errors": proxied["errors"],
        # CPU time per request (µs), over the whole run at full concurrency, warm-up included
        "serving_replica_cpu_us_per_request": replica_cpu * 1e6,
        "serving_proxy_cpu_us_per_request": proxy_cpu * 1e6,
    }
    if single > 0:
        out.update(
            serving_single_direct_p50_ms=direct1["p50_ms"],
            serving_single_proxy_p50_ms=proxied1["p50_ms"],
            serving_single_proxy_added_p50_ms=proxied1["p50_ms"] - direct1["p50_ms"],
            serving_single_proxy_added_p99_ms=proxied1["p99_ms"] - direct1["p99_ms"],
            serving_single_errors=direct1["errors"] + proxied1["errors"],
        )
    return out


def summary(rounds: list[dict[str, float]]) -> dict[str, Any]:
    """Medians over rounds, the spread (min, max) and every round, rounded as the bench does."""
    keys = list(rounds[0])
    spread = {k: [min(r[k] for r in rounds), max(r[k] for r in rounds)] for k in keys}
    return {
        "median": {k: round(statistics.median(r[k] for r in rounds), 2) for k in keys},
        "spread": {k: [round(low, 2), round(high, 2)] for k, (low, high) in spread.items()},
        "each_round": [{k: round(v, 2) for k, v in r.items()} for r in rounds],
    }


async def alone(repeat: int) -> dict[str, Any]:
    knobs = settings()
    rounds = [await serving_phase(knobs) for _ in range(repeat)]
    return {"settings": knobs, "cpus_online": os.cpu_count(), **summary(rounds)}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench.serving")
    sub = parser.add_subparsers(dest="role")
    rep = sub.add_parser("replica", help="(internal) the replica: GET /work")
    rep.add_argument("--port", type=int, required=True)
    rep.add_argument("--cpu", type=int)
    gen = sub.add_parser("load", help="(internal) the load generator; its token: BENCH_SERVING_TOKEN")
    gen.add_argument("url")
    gen.add_argument("--concurrency", type=int, default=32)
    gen.add_argument("--seconds", type=float, default=10)
    gen.add_argument("--warmup", type=float, default=2)
    gen.add_argument("--cpu", type=int)
    args = parser.parse_args(argv)
    if args.role in ("replica", "load") and args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    if args.role == "replica":
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(_serve_replica(args.port))
    elif args.role == "load":
        token = os.environ.get("BENCH_SERVING_TOKEN") or None
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(_run_load(args.url, args.concurrency, args.seconds, args.warmup, token))
    else:  # the phase alone: BENCH_REPEAT rounds
        outcome = asyncio.run(alone(int(os.environ.get("BENCH_REPEAT", 3))))
        text = json.dumps(outcome, indent=2)
        out = Path(ROOT / ".dev" / "bench" / "serving.json")
        out.write_text(text)
        print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
