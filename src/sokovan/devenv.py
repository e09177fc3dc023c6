"""`sokovan dev`: services, schema, an admin keypair, a manager and two agents.

The agents run kernels in containers when scripts/services.py found or started a container engine
and a local registry with the default images (SOKOVAN_ENGINE, SOKOVAN_REGISTRY); otherwise the
script said why, and they run kernels as host processes.

Services come from the SOKOVAN_* variables when set, else the standard local ports, else
throwaway servers started under `.dev/` by scripts/services.py; those `sokovan dev` started it also
stops again, while throwaway servers that were already running (`make services`) are left running.
The daemons are a sokovan.harness.LocalCluster; what is dev's own is the services, the fixed
API address and the printing of the URL and token.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time

from sokovan.db.migrate import PROJECT_ROOT
from sokovan.harness import HarnessError, LocalCluster, prepare_database, read_env_file

DEV_DIR = PROJECT_ROOT / ".dev"
ENV_FILE = DEV_DIR / "dev.env"
AGENTS = ("dev-agent-1", "dev-agent-2")
SERVICES = PROJECT_ROOT / "scripts" / "services.py"
THROWAWAY_STATE = DEV_DIR / "services" / "state.json"  # scripts/services.py's record of its servers


class DevError(RuntimeError):
    """Something `sokovan dev` needs could not be had."""


def ensure_services() -> dict[str, str]:
    DEV_DIR.mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, str(SERVICES), "up", "--env-file", str(ENV_FILE)], check=False)
    if done.returncode != 0:
        raise DevError("could not make PostgreSQL, Redis and etcd available (see the messages above)")
    values = read_env_file(ENV_FILE)
    if "SOKOVAN_DB_URL" not in os.environ:
        values["SOKOVAN_DB_URL"] = values["SOKOVAN_DB_URL"].rsplit("/", 1)[0] + "/sokovan"
    return values


def agent_backend(values: dict[str, str]) -> tuple[str, tuple[str, ...]]:
    """("container" or "process", the agents' backend flags) from the services found."""
    engine, registry = values.get("SOKOVAN_ENGINE"), values.get("SOKOVAN_REGISTRY")
    if engine and registry:
        return "container", ("--backend", "container", "--engine", engine, "--registry", registry)
    print("no container engine and registry: the agents run kernels as host processes", flush=True)
    return "process", ("--backend", "process")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_dev() -> None:
    # Ctrl-C and SIGTERM stop everything, even when started in the background (where SIGINT
    # arrives ignored).
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)

    env = dict(os.environ)
    throwaways_before = THROWAWAY_STATE.exists()  # started earlier (make services): not ours to stop
    env.update(ensure_services())
    backend, agent_flags = agent_backend(env)
    env.setdefault("SOKOVAN_CLUSTER_SECRET", secrets.token_urlsafe(24))
    env.setdefault("SOKOVAN_API_BIND", "127.0.0.1:8090")
    asyncio.run(prepare_database(env["SOKOVAN_DB_URL"]))
    cluster = LocalCluster(env, DEV_DIR, log=False, bind=env["SOKOVAN_API_BIND"])
    try:
        token = cluster.bootstrap()
    except HarnessError as exc:
        raise DevError(str(exc)) from exc
    try:
        cluster.start_manager(wait=False)
        for agent_id in AGENTS:
            cluster.start_agent(agent_id, extra=agent_flags)
        proxy = cluster.start_proxy(env.setdefault("SOKOVAN_PROXY_BIND", "127.0.0.1:8091"), wait=False)
        asyncio.run(cluster.wait_ready(AGENTS, within=60))
        proxy.wait_up()
        print(
            f"\nSokovan is running: a manager, {len(AGENTS)} {backend} agents and the app proxy.\n"
            f"  API:     {cluster.api}\n  console: {cluster.api}/ui/\n  proxy:   {proxy.url}\n"
            f"  token:   {token}\n\n"
            f"  export SOKOVAN_API={cluster.api} SOKOVAN_TOKEN={token}\n"
            "  sokovan session create --image python:3 --command 'echo hello' --wait\n\n"
            "Press Ctrl-C to stop everything.",
            flush=True,
        )
        while True:
            cluster.check_alive()
            time.sleep(0.5)
    except HarnessError as exc:
        raise DevError(f"{exc}; stopping the rest") from exc
    except KeyboardInterrupt:
        print("\nstopping…", flush=True)
    finally:
        cluster.stop(timeout=15)
        if not throwaways_before:
            subprocess.run([sys.executable, str(SERVICES), "down"], check=False)
