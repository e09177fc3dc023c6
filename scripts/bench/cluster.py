"""A benchmark cluster: fresh database, a real `sokovan manager` and a hollow fleet."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis.asyncio as aioredis
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from sokovan.bus.hints import HintPublisher
from sokovan.db import migrate
from sokovan.db.models import Agent
from sokovan.manager.repositories.tenancy import bootstrap

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def service_env() -> dict[str, str]:
    values = dict(os.environ)
    env_file = ROOT / ".env.services"
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values.setdefault(key.strip(), value.strip())
    return values


async def fresh_database(server_url: str, name: str) -> str:
    admin = create_async_engine(f"{server_url.rsplit('/', 1)[0]}/postgres", isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    await admin.dispose()
    url = f"{server_url.rsplit('/', 1)[0]}/{name}"
    await asyncio.to_thread(migrate.upgrade, url)
    return url


class BenchCluster:
    def __init__(self, agents: int, slots: str, workers: int = 2) -> None:
        self.agents = agents
        self.workers = workers
        self.slots = slots
        base = service_env()
        run = secrets.token_hex(4)
        self.env = {
            **base,
            "SOKOVAN_CLUSTER_SECRET": secrets.token_urlsafe(16),
            "SOKOVAN_ETCD_PREFIX": f"sokovan-bench-{run}",
            "SOKOVAN_API_BIND": f"127.0.0.1:{free_port()}",
            # The bench's one manager (two workers) may use more connections than the default.
            "SOKOVAN_DB_POOL_SIZE": "20",
            "SOKOVAN_DB_MAX_OVERFLOW": "15",
        }
        self.api = f"http://{self.env['SOKOVAN_API_BIND']}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.token = ""
        self.engine: AsyncEngine | None = None
        self.logdir = ROOT / ".dev" / "bench"
        self.logdir.mkdir(parents=True, exist_ok=True)

    async def start(self) -> None:
        url = await fresh_database(
            self.env.get("SOKOVAN_DB_URL", "postgresql+asyncpg://postgres@127.0.0.1/postgres"),
            "sokovan_bench",
        )
        self.env["SOKOVAN_DB_URL"] = url
        self.engine = create_async_engine(url, pool_size=4)
        _, self.token = await bootstrap(self.engine)
        self._spawn("manager", ["manager", "--workers", str(self.workers)])
        self._spawn(
            "fleet",
            [
                "agent",
                "--simulate",
                str(self.agents),
                "--id",
                "bench",
                "--slots",
                self.slots,
                "--rpc-port",
                str(free_port()),
            ],
        )
        deadline = time.monotonic() + 120
        while await self.count_agents() < self.agents:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"cluster did not come up; see {self.logdir}")
            await asyncio.sleep(0.5)

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.logdir / f"{name}.log", "wb")
        self.procs.append(
            subprocess.Popen([sys.executable, "-m", "sokovan", *args], env=self.env, stdout=log, stderr=log)
        )

    async def count_agents(self) -> int:
        assert self.engine is not None
        async with self.engine.connect() as conn:
            return int(await conn.scalar(select(func.count()).select_from(Agent)) or 0)

    async def hint(self) -> None:
        """Wake the manager's schedule loop at once (what a create or an agent event does)."""
        client = aioredis.Redis.from_url(self.env.get("SOKOVAN_REDIS_URL", "redis://127.0.0.1:6379/0"))
        await HintPublisher(client, self.env["SOKOVAN_ETCD_PREFIX"]).hint("schedule")
        await client.aclose()

    async def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                await asyncio.to_thread(p.wait, 30)
            except subprocess.TimeoutExpired:
                p.kill()
        if self.engine is not None:
            await self.engine.dispose()


def dump(result: dict[str, object]) -> str:
    return json.dumps(result, indent=2, default=str)
