"""A local test cluster: `sokovan manager` and `sokovan agent` daemons as subprocesses.

Why this exists: `sokovan dev`, the benchmark (scripts/bench), the black-box e2e tests and the
fault tests all need the same thing — a database migrated and bootstrapped with an admin token,
a manager on a free port, agents, a wait until they are up, and a stop that leaves nothing
behind. Each used to carry its own copy (and its own `free_port()`); this is the one copy. It
lives in the package, not under tests/, because `sokovan dev` uses it.

- `process`: one daemon (`Daemon`, `ManagerProc`, `AgentProc`), `free_port`, `stop_all`, waits.
- `database`: create/migrate, truncate, admin bootstrap, counting and waiting for agents.
- `cluster`: `LocalCluster`, a manager and its agents that are stopped together.

A daemon only ever signals the process it started itself.
"""

from sokovan.harness.cluster import LocalCluster, read_env_file
from sokovan.harness.database import (
    bootstrap_admin,
    count_agents,
    prepare_database,
    truncate_tables,
    wait_agents,
)
from sokovan.harness.process import (
    SOKOVAN,
    AgentProc,
    Daemon,
    HarnessError,
    ManagerProc,
    ProxyProc,
    check_alive,
    free_port,
    reachable,
    stop_all,
    wait_until,
)

__all__ = [
    "SOKOVAN",
    "AgentProc",
    "Daemon",
    "HarnessError",
    "LocalCluster",
    "ManagerProc",
    "ProxyProc",
    "bootstrap_admin",
    "check_alive",
    "count_agents",
    "free_port",
    "prepare_database",
    "reachable",
    "read_env_file",
    "stop_all",
    "truncate_tables",
    "wait_agents",
    "wait_until",
]
