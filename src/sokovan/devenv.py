"""`sokovan dev`: services, schema, an admin keypair, a manager and two process agents.

Services come from the SOKOVAN_* variables when set, else the standard local ports, else
throwaway servers started under `.dev/` by scripts/services.py (which also stops them again).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import create_async_engine

from sokovan.db import migrate
from sokovan.db.migrate import PROJECT_ROOT
from sokovan.db.models import Agent

DEV_DIR = PROJECT_ROOT / ".dev"
ENV_FILE = DEV_DIR / "dev.env"
AGENTS = ("dev-agent-1", "dev-agent-2")


class DevError(RuntimeError):
    """Something `sokovan dev` needs could not be had."""


def ensure_services() -> dict[str, str]:
    DEV_DIR.mkdir(exist_ok=True)
    script = PROJECT_ROOT / "scripts" / "services.py"
    done = subprocess.run([sys.executable, str(script), "up", "--env-file", str(ENV_FILE)], check=False)
    if done.returncode != 0:
        raise DevError("could not make PostgreSQL, Redis and etcd available (see the messages above)")
    values = dict(line.split("=", 1) for line in ENV_FILE.read_text().splitlines() if "=" in line)
    if "SOKOVAN_DB_URL" not in os.environ:
        values["SOKOVAN_DB_URL"] = values["SOKOVAN_DB_URL"].rsplit("/", 1)[0] + "/sokovan"
    return values


async def ensure_database(url: str) -> None:
    server, _, name = url.rpartition("/")
    engine = create_async_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    async with engine.connect() as conn:
        exists = await conn.scalar(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name})
        if not exists:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
    await engine.dispose()


async def count_ready_agents(url: str) -> int:
    engine = create_async_engine(url)
    async with engine.connect() as conn:
        n = await conn.scalar(select(func.count()).select_from(Agent).where(Agent.id.in_(AGENTS)))
    await engine.dispose()
    return int(n or 0)


def _healthy(api: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api}/healthz", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_dev() -> None:
    from sokovan.manager.repositories.tenancy import bootstrap

    # Ctrl-C and SIGTERM stop everything, even when started in the background (where SIGINT
    # arrives ignored).
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)

    env = dict(os.environ)
    env.update(ensure_services())
    env.setdefault("SOKOVAN_CLUSTER_SECRET", secrets.token_urlsafe(24))
    env.setdefault("SOKOVAN_API_BIND", "127.0.0.1:8090")
    db_url = env["SOKOVAN_DB_URL"]
    asyncio.run(ensure_database(db_url))
    migrate.upgrade(db_url)

    async def _bootstrap() -> tuple[str, str]:
        engine = create_async_engine(db_url)
        try:
            return await bootstrap(engine)
        finally:
            await engine.dispose()

    _, token = asyncio.run(_bootstrap())
    api = f"http://{env['SOKOVAN_API_BIND']}"
    base = [sys.executable, "-m", "sokovan"]
    procs = [subprocess.Popen([*base, "manager"], env=env)]
    for agent_id in AGENTS:
        procs.append(
            subprocess.Popen(
                [*base, "agent", "--id", agent_id, "--rpc-port", "0", "--work-dir", str(DEV_DIR / agent_id)],
                env=env,
            )
        )
    try:
        deadline = time.monotonic() + 60
        while not (_healthy(api) and asyncio.run(count_ready_agents(db_url)) == len(AGENTS)):
            if any(p.poll() is not None for p in procs):
                raise DevError("a daemon exited during start-up (see its messages above)")
            if time.monotonic() > deadline:
                raise DevError("the manager and agents did not come up within 60 s")
            time.sleep(0.3)
        print(
            f"\nSokovan is running: a manager and {len(AGENTS)} process agents.\n"
            f"  API:   {api}\n  token: {token}\n\n"
            f"  export SOKOVAN_API={api} SOKOVAN_TOKEN={token}\n"
            "  sokovan session create --image python:3 --command 'echo hello' --wait\n\n"
            "Press Ctrl-C to stop everything.",
            flush=True,
        )
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        raise DevError("a daemon exited; stopping the rest")
    except KeyboardInterrupt:
        print("\nstopping…", flush=True)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run([sys.executable, str(PROJECT_ROOT / "scripts" / "services.py"), "down"], check=False)
