"""What `scripts/services.py` is made of: it makes sure PostgreSQL, Redis, etcd (and a container
engine with a registry) answer for development and tests, and records the throwaway servers it
started. Standard library only; `scripts/services.py` is the entry point (its docstring: the usage).

    common.py           the paths, addresses and names every part shares; ServiceError, log
    checks.py           the probes: is a PostgreSQL, Redis, etcd, engine or registry answering there
    addresses.py        the addresses in SOKOVAN_* variables: parsed, written, checked
    processes.py        free ports, live pids, starting a server and waiting until it is ready, kill
    state.py            the state file (.dev/services/state.json), atomic writes, the lock
    postgres_server.py  a throwaway PostgreSQL: find its binaries, start, stop
    redis_server.py     a throwaway Redis: find redis-server, start
    etcd_server.py      a throwaway etcd: find its binary, start
    owned.py            the servers this script started: whether one still runs, stopping one
    containers.py       the container engine and the registry: found, started; the default images
    resolve.py          for PostgreSQL, Redis and etcd: which address to use, starting a server if needed
    cli.py              the commands up, down and status; main()
"""
