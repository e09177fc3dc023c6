"""`LocalCluster`: one manager and its agents sharing one environment, stopped together (see
sokovan.harness)."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from pathlib import Path
from types import TracebackType

from sokovan.harness.database import bootstrap_admin, wait_agents
from sokovan.harness.process import (
    AgentProc,
    Daemon,
    ManagerProc,
    ProxyProc,
    check_alive,
    stop_all,
    write_secret_file,
)


def read_env_file(path: Path) -> dict[str, str]:
    """`KEY=value` lines of a file such as .env.services (comments skipped; nothing if it is missing)."""
    values: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and not key.startswith("#"):
                values[key.strip()] = value.strip()
    return values


class LocalCluster:
    """A manager (on `bind`, default a free port) and agents started with `env` (which names the
    database, Redis, etcd prefix and cluster secret). Agent work directories go under `workdir`,
    and so do the daemons' logs unless `log` is False (or under `log_dir` when given). With
    `echo`, the daemons' output also goes to this process's stdout/stderr (`Daemon.echo`).
    `agent_args` are given to every agent.

    Agents get only what they need of `env` (`agent_environment`: no database URL, no token),
    and the cluster secret in a file (`<workdir>/.cluster-secret`, 0600), not in their environment.

    `stop()`, or leaving a `with` block, stops every daemon it started, also when starting failed
    half-way; agents are stopped with SIGINT, which destroys their kernels (`AgentProc.detach()`
    stops one with SIGTERM, leaving its kernels to its next start)."""

    def __init__(
        self,
        env: dict[str, str],
        workdir: Path,
        *,
        log: bool = True,
        bind: str | None = None,
        manager_args: Sequence[str] = (),
        agent_args: Sequence[str] = (),
        log_dir: Path | None = None,
        echo: bool = False,
    ) -> None:
        self.workdir = workdir
        self.log_dir = (log_dir or workdir) if log else None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        self.echo = echo
        self.manager = ManagerProc(env, self.log_dir, bind=bind, args=manager_args)
        self.manager.echo = echo
        self.env = self.manager.env
        self.api = self.manager.api
        self.api_port = self.manager.port
        self.agent_args = tuple(agent_args)
        self.agents: dict[str, AgentProc] = {}
        self.proxy: ProxyProc | None = None
        self.token = ""

    @property
    def daemons(self) -> list[Daemon]:
        return [self.manager, *self.agents.values(), *([self.proxy] if self.proxy else [])]

    def start_proxy(self, bind: str | None = None, wait: bool = True) -> ProxyProc:
        """The app proxy (restartable: a second call starts the same one again)."""
        if self.proxy is None:
            self.proxy = ProxyProc(self.env, self.log_dir, bind=bind)
            self.proxy.echo = self.echo
        self.proxy.start()
        if wait:
            self.proxy.wait_up()
        return self.proxy

    def bootstrap(self) -> str:
        """A new admin token (also kept as `self.token`)."""
        self.token = bootstrap_admin(self.env)
        return self.token

    def start_manager(self, wait: bool = True, within: float = 30) -> None:
        self.manager.start()
        if wait:
            self.manager.wait_up(within)

    def stop_manager(self, timeout: float = 20) -> None:
        """SIGTERM and wait: `subprocess.TimeoutExpired` if it does not stop within `timeout`
        seconds (`stop()` kills it then)."""
        self.manager.terminate()
        self.manager.wait(timeout)

    def start_agent(
        self,
        agent_id: str,
        slots: str | None = None,
        *,
        simulate: int | None = None,
        rpc_port: int = 0,
        extra: Sequence[str] = (),
    ) -> AgentProc:
        """A process agent working under `workdir/<agent_id>`, or with `simulate` a hollow fleet."""
        agent = AgentProc(
            self.env,
            self.log_dir,
            agent_id,
            slots=slots,
            work_dir=None if simulate is not None else self.workdir / agent_id,
            simulate=simulate,
            rpc_port=rpc_port,
            extra=(*self.agent_args, *extra),
            secret_file=self._secret_file(),
        )
        agent.echo = self.echo
        self.agents[agent_id] = agent
        agent.start()
        return agent

    def _secret_file(self) -> Path | None:
        """The cluster secret in a file of the cluster's directory (0600), for its agents."""
        secret = self.env.get("SOKOVAN_CLUSTER_SECRET")
        if not secret:
            return None
        return write_secret_file(self.workdir / ".cluster-secret", secret)

    def check_alive(self) -> None:
        """HarnessError if any daemon exited without being stopped."""
        check_alive(self.daemons)

    async def wait_ready(self, agents: int | Collection[str], within: float = 30) -> None:
        """Until the manager answers /healthz and `agents` (a number, or these ids) have registered;
        HarnessError when a daemon exits first or `within` seconds pass."""
        began = time.monotonic()
        await self.manager.wait_healthy(within)
        ids = None if isinstance(agents, int) else list(agents)
        count = agents if isinstance(agents, int) else len(agents)
        left = max(within - (time.monotonic() - began), 0.0)
        await wait_agents(self.env["SOKOVAN_DB_URL"], count, left, ids=ids, watch=self.daemons)

    def stop(self, timeout: float = 20) -> None:
        stop_all(self.daemons, timeout)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
