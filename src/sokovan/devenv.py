"""`sokovan dev`: services, schema, an admin keypair, a manager, two agents and the app proxy.

The agents run kernels in containers when scripts/services.py found or started a container engine
and a local registry with the default images (SOKOVAN_ENGINE, SOKOVAN_REGISTRY); otherwise the
script said why, and they run kernels as host processes. They share the host between them: each
offers its share of the host's CPUs and memory (`agent_slots`), not the whole host.

Services come from the SOKOVAN_* variables when set, else the standard local ports, else
throwaway servers started under `.dev/` by scripts/services.py; those `sokovan dev` started it also
stops again, while throwaway servers that were already running (`make services`) are left running.
The addresses are those of `.env.services`, the one file scripts/services.py writes (for
`make services`, the tests and this); the database is `sokovan` on the server it names
(`dev_database_url`). State is kept between runs (the cluster secret too, in `.dev/.cluster-secret`);
`--fresh` (`make dev-reset`) starts from an empty database, empty agent work directories, none of
the cluster's keys in Redis and a new secret.

The daemons are a sokovan.harness.LocalCluster; their output goes to this terminal and to
`.dev/logs/<name>.log`. An agent that stops is reported and the rest keep running; the manager or
the proxy stopping stops everything (`Supervisor`). What is dev's own is the services, the fixed
API address and the printing of the URL and token.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from decimal import ROUND_DOWN, Decimal
from pathlib import Path

from sokovan.db.migrate import PROJECT_ROOT
from sokovan.harness import Daemon, HarnessError, LocalCluster, prepare_database, read_env_file

DEV_DIR = PROJECT_ROOT / ".dev"
LOG_DIR = DEV_DIR / "logs"
ENV_FILE = PROJECT_ROOT / ".env.services"  # written by scripts/services.py up, as for `make services`
OLD_ENV_FILE = DEV_DIR / "dev.env"  # where earlier versions wrote a second copy of it
DEV_DATABASE = "sokovan"
AGENTS = ("dev-agent-1", "dev-agent-2")
SERVICES = PROJECT_ROOT / "scripts" / "services.py"
THROWAWAY_STATE = DEV_DIR / "services" / "state.json"  # scripts/services.py's record of its servers
SECRET_FILE = DEV_DIR / ".cluster-secret"  # LocalCluster writes the secret there for its agents
MIB = 2**20
TAIL_LINES = 20
START_MARK = "\n===== start #"  # what a Daemon writes to its log at each start


class DevError(RuntimeError):
    """Something `sokovan dev` needs could not be had, or a daemon it cannot do without stopped."""


def ensure_services() -> dict[str, str]:
    """The services' addresses, as scripts/services.py wrote them to `.env.services`."""
    DEV_DIR.mkdir(exist_ok=True)
    OLD_ENV_FILE.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, str(SERVICES), "up", "--env-file", str(ENV_FILE)], check=False)
    if done.returncode != 0:
        raise DevError("could not make PostgreSQL, Redis and etcd available (see the messages above)")
    return read_env_file(ENV_FILE)


def dev_database_url(url: str) -> str:
    """The database `sokovan dev` uses: `sokovan` (or SOKOVAN_DEV_DATABASE: the README test runs
    on a database of its own) on the server `url` names when `url` names the maintenance database
    `postgres` (as `.env.services` does: it holds a server's address), else the database `url`
    names (a SOKOVAN_DB_URL set on purpose)."""
    parts = urllib.parse.urlsplit(url)
    if parts.path.strip("/") not in ("", "postgres"):
        return url
    name = os.environ.get("SOKOVAN_DEV_DATABASE") or DEV_DATABASE
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def agent_slots(cpus: int | Decimal, mem: int | Decimal, agents: int) -> str:
    """`--slots` for each of `agents` agents sharing a host of `cpus` CPUs and `mem` bytes: an
    equal share, CPUs to two decimal places (at least 1, what a session asks for by default) and
    memory in whole MiB, both rounded down, so that together they never offer more than the host
    (but on a host with fewer CPUs than agents)."""
    if agents < 1:
        raise ValueError("agents must be at least 1")
    cpu = max((Decimal(cpus) / agents).quantize(Decimal("0.01"), rounding=ROUND_DOWN), Decimal(1))
    mem_mib = int(Decimal(mem) // MIB // agents)
    return f"cpu={cpu.normalize():f},mem={mem_mib}m"


def host_agent_slots(agents: int) -> str:
    """`agent_slots` of this host (as `sokovan agent` measures it by default)."""
    from sokovan.cli.agent_config import host_slots

    host = host_slots()
    return agent_slots(host["cpu"], host["mem"], agents)


def cluster_secret(fresh: bool) -> str:
    """The cluster secret of the last run (kept in `.dev/.cluster-secret`, 0600), so that what it
    signed and left in Redis (events, the proxy's routing table) is still recognised; a new one
    with `--fresh` or the first time."""
    if not fresh:
        try:
            kept = SECRET_FILE.read_text().strip()
        except OSError:
            kept = ""
        if kept:
            return kept
    return secrets.token_urlsafe(24)


def agent_backend(values: dict[str, str]) -> tuple[str, tuple[str, ...]]:
    """("container" or "process", the agents' backend flags) from the services found."""
    engine, registry = values.get("SOKOVAN_ENGINE"), values.get("SOKOVAN_REGISTRY")
    if engine and registry:
        return "container", ("--backend", "container", "--engine", engine, "--registry", registry)
    print("no container engine and registry: the agents run kernels as host processes", flush=True)
    return "process", ("--backend", "process")


async def reset_state(
    db_url: str, agent_dirs: Sequence[Path], *, redis_url: str | None = None, prefix: str = "sokovan"
) -> None:
    """`--fresh`: the database dropped and created again (migrated to head, empty), the agents'
    work directories (their kernels' files and their state files) removed, and with `redis_url`
    the cluster's keys in Redis (`<prefix>:*`: events, hints, the routing table) deleted, so that
    nothing of an earlier run is read again. The cluster settings in etcd are kept."""
    await prepare_database(db_url, fresh=True)
    for directory in agent_dirs:
        try:
            shutil.rmtree(directory)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise DevError(f"cannot remove {directory}: {exc}") from exc
    if redis_url is not None:
        await _delete_keys(redis_url, prefix)


async def _delete_keys(redis_url: str, prefix: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url)
    try:
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + ":*"
        keys = [key async for key in client.scan_iter(match=pattern, count=1000)]
        for start in range(0, len(keys), 1000):
            await client.delete(*keys[start : start + 1000])
    finally:
        await client.aclose()


def describe_exit(code: int) -> str:
    """`exit code 3`, or `killed by SIGKILL` for a process a signal ended."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def log_tail(daemon: Daemon, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of its log, indented; a pointer to the messages above without one."""
    if daemon.log_path is None:
        return "  (see its messages above)"
    text = daemon.log_text()
    text = text[text.rfind(START_MARK) + 1 :]  # this start's lines only (the log is appended to)
    tail = text.rstrip("\n").splitlines()[-lines:]
    return "\n".join(f"  | {line}" for line in tail) or "  (its log is empty)"


class Supervisor:
    """Watches the dev stack: an agent that stops is reported once (`say`) and the rest keep
    running; an `essential` daemon (the manager, the proxy) that stops raises DevError, which stops
    everything. Daemons stopped on purpose (`Daemon.terminate` and the like) are not reported."""

    def __init__(
        self, essential: Sequence[Daemon], agents: Sequence[Daemon], say: Callable[[str], None] = print
    ) -> None:
        self.essential = list(essential)
        self.agents = list(agents)
        self.say = say
        self.stopped: dict[str, int] = {}  # agent name -> exit code, once reported

    def check(self) -> None:
        for daemon in self.essential:
            if daemon.failure() is not None:
                assert daemon.proc is not None
                raise DevError(
                    f"{daemon.name} stopped ({describe_exit(daemon.proc.returncode)}); stopping "
                    f"everything. The end of {daemon.log_path or 'its output'}:\n{log_tail(daemon)}"
                )
        for agent in self.agents:
            if agent.name in self.stopped or agent.failure() is None:
                continue
            assert agent.proc is not None
            self.stopped[agent.name] = agent.proc.returncode
            running = sum(1 for a in self.agents if a.running)
            self.say(
                f"\n{agent.name} stopped ({describe_exit(agent.proc.returncode)}); the rest keep "
                f"running ({running} of {len(self.agents)} agents; Ctrl-C stops everything). "
                f"The end of {agent.log_path or 'its output'}:\n{log_tail(agent)}\n"
            )

    def run(self, poll: float = 0.5, until: Callable[[], bool] = lambda: False) -> None:
        """`check` every `poll` seconds until `until()` (or an exception: DevError, Ctrl-C)."""
        while not until():
            self.check()
            time.sleep(poll)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _activate_line() -> str:
    """`source <venv>/bin/activate` when this runs from a virtual environment (`sokovan` is then
    on the PATH after it), else nothing."""
    activate = Path(sys.prefix) / "bin" / "activate"
    if sys.prefix == sys.base_prefix or not activate.exists():
        return ""
    return f"  source {activate}\n"


def _where(db_url: str) -> str:
    """`sokovan on 127.0.0.1:5432`: the database and its server, without credentials."""
    parts = urllib.parse.urlsplit(db_url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.path.lstrip('/')} on {parts.hostname or 'the local socket'}{port}"


def banner(backend: str, api: str, proxy: str, token: str, db_url: str) -> str:
    """What `sokovan dev` prints once everything answers: where things are and a first session."""
    return (
        f"\nSokovan is running: a manager, {len(AGENTS)} {backend} agents and the app proxy.\n"
        f"  API:      {api}\n  console:  {api}/ui/\n  proxy:    {proxy}\n  token:    {token}\n"
        f"  database: {_where(db_url)}\n  logs:     {LOG_DIR}/\n\n"
        "In another terminal:\n"
        f"{_activate_line()}"
        f"  export SOKOVAN_API={api} SOKOVAN_TOKEN={token}\n"
        "  sokovan session create --image python:3 --type batch --command 'echo hello' --wait\n\n"
        "Press Ctrl-C to stop everything (state is kept; `make dev-reset` starts afresh)."
    )


def run_dev(fresh: bool = False) -> None:
    # Ctrl-C and SIGTERM stop everything, even when started in the background (where SIGINT
    # arrives ignored).
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)

    env = dict(os.environ)
    throwaways_before = THROWAWAY_STATE.exists()  # started earlier (make services): not ours to stop
    try:
        env.update(ensure_services())
        env["SOKOVAN_DB_URL"] = dev_database_url(env["SOKOVAN_DB_URL"])
        backend, agent_flags = agent_backend(env)
        if not env.get("SOKOVAN_CLUSTER_SECRET"):
            env["SOKOVAN_CLUSTER_SECRET"] = cluster_secret(fresh)
        env.setdefault("SOKOVAN_API_BIND", "127.0.0.1:8090")
        if fresh:
            print("--fresh: a new dev database, no agent work directories, no Redis state", flush=True)
            dirs = [DEV_DIR / agent_id for agent_id in AGENTS]
            prefix = env.get("SOKOVAN_ETCD_PREFIX") or "sokovan"
            asyncio.run(
                reset_state(env["SOKOVAN_DB_URL"], dirs, redis_url=env["SOKOVAN_REDIS_URL"], prefix=prefix)
            )
        asyncio.run(prepare_database(env["SOKOVAN_DB_URL"]))
        _run_cluster(env, backend, agent_flags)
    finally:
        if not throwaways_before and THROWAWAY_STATE.exists():
            subprocess.run([sys.executable, str(SERVICES), "down", "--env-file", str(ENV_FILE)], check=False)


def _run_cluster(env: dict[str, str], backend: str, agent_flags: tuple[str, ...]) -> None:
    cluster = LocalCluster(env, DEV_DIR, log_dir=LOG_DIR, echo=True, bind=env["SOKOVAN_API_BIND"])
    try:
        token = cluster.bootstrap()
    except HarnessError as exc:
        raise DevError(str(exc)) from exc
    slots = host_agent_slots(len(AGENTS))
    try:
        cluster.start_manager(wait=False)
        for agent_id in AGENTS:
            cluster.start_agent(agent_id, slots=slots, extra=agent_flags)
        proxy = cluster.start_proxy(env.setdefault("SOKOVAN_PROXY_BIND", "127.0.0.1:8091"), wait=False)
        asyncio.run(cluster.wait_ready(AGENTS, within=60))
        proxy.wait_up()
        print(banner(backend, cluster.api, proxy.url, token, env["SOKOVAN_DB_URL"]), flush=True)
        Supervisor([cluster.manager, proxy], list(cluster.agents.values())).run()
    except HarnessError as exc:
        raise DevError(f"{exc}; stopping the rest") from exc
    except KeyboardInterrupt:
        print("\nstopping…", flush=True)
    finally:
        cluster.stop(timeout=15)
