#!/usr/bin/env python3
"""Make sure PostgreSQL, Redis and etcd are reachable for development and tests, and a container
engine with a local registry where Podman (or Docker) can be had.

    python scripts/services.py up [--fresh] [--no-start] [--no-images] [--env-file PATH] [--timeout SECONDS]
    python scripts/services.py down
    python scripts/services.py status

`up` decides, for each service, in this order:

1. the environment variable (SOKOVAN_DB_URL, SOKOVAN_REDIS_URL, SOKOVAN_ETCD) when it is set;
2. the standard local port (5432, 6379, 2379) when a server of the right kind answers there;
3. a throwaway server this script started earlier and that is still alive;
4. a new throwaway server started from locally installed binaries under `.dev/services/`,
   on a free port.

and writes the chosen addresses to `.env.services` at the repository root, which the tests
(tests/services.py) and `sokovan dev` read. `--fresh` (or SOKOVAN_SERVICES_FORCE_LOCAL=1) skips
steps 1 and 2, so throwaway servers are always used. `--no-start` skips step 4 and fails instead.

The container engine and its registry (for the agents' container backend) come the same way,
without the standard ports: SOKOVAN_REGISTRY (`host:port`) and SOKOVAN_ENGINE (`unix:///path` or
`tcp://host:port`) when set and answering; else a `docker-registry` on 127.0.0.1 (data under
`.dev/services/registry/`) and a Podman API service on `.dev/services/engine/podman.sock`, whose
containers.conf and registries.conf (the registry trusted over plain HTTP) are written beside it;
else, without Podman, a Docker engine on DOCKER_HOST or /var/run/docker.sock. As root with apt-get,
missing podman, runc, docker-registry and busybox-static are installed. Both addresses go to
`.env.services`, then `sokovan images build` pushes the default images into the registry (only
what changed; `--no-images` skips it). Without an engine, `up` says why in one line and goes on:
kernels then run with the process backend. SOKOVAN_ENGINE=none skips the engine on purpose.

`down` stops only what this script started (recorded in `.dev/services/state.json`) and removes
their data directories. Standard library only: run it with the project's venv python or python3.
"""

# The parts live in scripts/devservices/ (see its __init__.py); this file is the entry point.

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python scripts/services.py` from any directory, with no venv: sys.path[0] is scripts/,
# so the repository root goes first for `scripts.devservices` to be this checkout's.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.devservices.cli import main

if __name__ == "__main__":
    sys.exit(main(description=__doc__))
