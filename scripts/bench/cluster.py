"""A benchmark cluster: fresh database, a real `sokovan manager` and a hollow fleet.

The daemons are a sokovan.harness.LocalCluster; what is the bench's own is the fresh database,
the run's etcd prefix, the manager's workers and pool size, and the hollow fleet."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from pathlib import Path

import redis.asyncio as aioredis
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from scripts.bench.node_failure import DOOMED_PREFIX, TIMINGS, configure
from sokovan.bus.hints import Hint, HintPublisher
from sokovan.harness import AgentProc, HarnessError, LocalCluster, free_port, prepare_database, read_env_file

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DB_URL = "postgresql+asyncpg://postgres@127.0.0.1/postgres"


def service_env() -> dict[str, str]:
    """This process's environment, then .env.services for what it does not set."""
    return {**read_env_file(ROOT / ".env.services"), **os.environ}


async def fresh_database(server_url: str, name: str) -> str:
    """The database `name` on the server of `server_url`, dropped, created and migrated."""
    url = f"{server_url.rsplit('/', 1)[0]}/{name}"
    await prepare_database(url, fresh=True)
    return url


# For every agent to beat at a new interval: it reads it within a second (a watch, then the
# fleet's loop) and beats within that interval after.
TIMINGS_SETTLE_S = 5.0


class BenchCluster:
    """`agents` hollow agents in all; with `doomed`, that many of them in a fleet process of their
    own (ids `b-doomed-NNNN`) that the node-failure phase kills."""

    def __init__(
        self,
        agents: int,
        slots: str,
        workers: str = "auto",
        doomed: int = 0,
        fleet_args: tuple[str, ...] = (),
    ) -> None:
        self.agents = agents
        self.fleet_args = fleet_args  # more options of the fleet's `sokovan agent` (e.g. --gpus 8)
        self.slots = slots
        self.doomed_count = doomed
        self.doomed: AgentProc | None = None
        base = service_env()
        run = secrets.token_hex(4)
        server = base.get("SOKOVAN_DB_URL", DEFAULT_DB_URL)
        env = {
            **base,
            "SOKOVAN_DB_URL": f"{server.rsplit('/', 1)[0]}/sokovan_bench",
            "SOKOVAN_CLUSTER_SECRET": secrets.token_urlsafe(16),
            "SOKOVAN_ETCD_PREFIX": f"sokovan-bench-{run}",
        }  # the manager as shipped: its default pool, its default workers unless BENCH_MANAGER_WORKERS
        self.logdir = ROOT / ".dev" / "bench"
        self.logdir.mkdir(parents=True, exist_ok=True)
        for old in ("manager.log", "bench.log", "proxy.log"):  # each round's logs, not every round's
            (self.logdir / old).unlink(missing_ok=True)
        self.cluster = LocalCluster(env, self.logdir, manager_args=("--workers", workers))
        self.env = self.cluster.env
        self.api = self.cluster.api
        self.token = ""
        self.engine: AsyncEngine | None = None

    async def start(self, timings: bool = True) -> None:
        """Start the manager and the fleet; with `timings`, under the bench's node timings
        (`node_failure.TIMINGS`: beats every 2 s) from the start, else under the cluster's
        defaults as shipped until `apply_timings`."""
        url = self.env["SOKOVAN_DB_URL"]
        await prepare_database(url, fresh=True)
        self.engine = create_async_engine(url, pool_size=4)
        self.token = await asyncio.to_thread(self.cluster.bootstrap)
        if timings:
            await configure(self.env)
        self.cluster.start_manager(wait=False)
        rest = self.agents - self.doomed_count
        self.cluster.start_agent(
            "bench", self.slots, simulate=rest, rpc_port=free_port(), extra=self.fleet_args
        )
        if self.doomed_count:
            self.doomed = self.cluster.start_agent(
                DOOMED_PREFIX, self.slots, simulate=self.doomed_count, rpc_port=free_port()
            )
        try:
            await self.cluster.wait_ready(self.agents, within=120)
        except HarnessError as exc:
            raise RuntimeError(f"cluster did not come up; see {self.logdir}: {exc}") from exc

    async def apply_timings(self) -> None:
        """Put the bench's node timings in etcd (the manager and the agents follow them live): the
        fleet's faster beats first, under the default timeout, and the short timeout only once
        every agent beats at the new pace, so that no live agent is judged silent meanwhile."""
        await configure(self.env, {"heartbeat_interval": TIMINGS["heartbeat_interval"]})
        await asyncio.sleep(TIMINGS_SETTLE_S)
        await configure(self.env)

    def manager_pids(self) -> list[int]:
        """The manager's processes: the one started and its workers (its children). Read from the
        process tree, not from who listens on the port: a worker that is still starting counts."""
        proc = self.cluster.manager.proc
        if proc is None:
            return []
        try:
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        except OSError:
            children = []
        return [proc.pid, *(int(c) for c in children)]

    def manager_rss_mib(self) -> list[float]:
        """Resident memory of each manager worker process (MiB): the manager and its children."""
        out = []
        for pid in self.manager_pids():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    out.append(round(int(line.split()[1]) / 1024, 1))
        return out

    async def hint(self) -> None:
        """Wake the manager's schedule loop at once (what a create or an agent event does)."""
        client = aioredis.Redis.from_url(self.env.get("SOKOVAN_REDIS_URL", "redis://127.0.0.1:6379/0"))
        await HintPublisher(client, self.env["SOKOVAN_ETCD_PREFIX"]).hint(Hint.SCHEDULE)
        await client.aclose()

    async def stop(self) -> None:
        await asyncio.to_thread(self.cluster.stop, 30)
        if self.engine is not None:
            await self.engine.dispose()
        await self.forget()

    async def forget(self) -> None:
        """Remove this run's keys from Redis (its streams, some 30 MB a round, and its marks): each
        round has a prefix of its own, and rounds left behind grew Redis by a gigabyte in a day's
        rounds, which the later rounds ran beside."""
        client = aioredis.Redis.from_url(self.env.get("SOKOVAN_REDIS_URL", "redis://127.0.0.1:6379/0"))
        try:
            batch: list[bytes] = []
            async for key in client.scan_iter(match=f"{self.env['SOKOVAN_ETCD_PREFIX']}:*", count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    await client.unlink(*batch)
                    batch = []
            if batch:
                await client.unlink(*batch)
        finally:
            await client.aclose()


def dump(result: dict[str, object]) -> str:
    return json.dumps(result, indent=2, default=str)
