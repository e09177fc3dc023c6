"""PostgreSQL, Redis and etcd: which address to use (the environment, the standard port, a throwaway
server started earlier, or a new one)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from scripts.devservices.addresses import check_value, url_for
from scripts.devservices.checks import etcd_check, pg_check, redis_check, tcp_answers
from scripts.devservices.common import ENV_VARS, HOST, STANDARD, ServiceError, log
from scripts.devservices.etcd_server import start_etcd
from scripts.devservices.owned import owned_alive, stop
from scripts.devservices.postgres_server import start_postgres
from scripts.devservices.redis_server import start_redis
from scripts.devservices.state import save_state

STARTERS: dict[str, Callable[[float], dict[str, Any]]] = {
    "postgres": start_postgres,
    "redis": start_redis,
    "etcd": start_etcd,
}
CHECKERS: dict[str, Callable[[str, int], str | None]] = {
    "postgres": lambda h, p: pg_check(h, p),
    "redis": lambda h, p: redis_check(h, p),
    "etcd": etcd_check,
}
LABELS = {"postgres": "PostgreSQL", "redis": "Redis", "etcd": "etcd"}


def resolve(name: str, state: dict[str, Any], *, fresh: bool, no_start: bool, timeout: float) -> str:
    label = LABELS[name]
    var = ENV_VARS[name]
    if not fresh:
        value = os.environ.get(var, "").strip()
        if value:
            deadline = time.monotonic() + timeout
            reason = check_value(name, value)
            while reason and time.monotonic() < deadline:
                time.sleep(0.5)
                reason = check_value(name, value)
            if reason:
                raise ServiceError(f"{label}: {var}={value} is set but does not answer: {reason}")
            log(f"{label}: using {var} from the environment ({value})")
            return value
        port = STANDARD[name]
        if tcp_answers(HOST, port):
            reason = CHECKERS[name](HOST, port)
            if reason is None:
                log(f"{label}: using the server on the standard port {HOST}:{port}")
                return url_for(name, HOST, port)
            log(
                f"{label}: something answers on {HOST}:{port} but it is not usable ({reason}); "
                "using a throwaway server instead"
            )
    entry = state.get(name)
    if entry and owned_alive(name, entry):
        reason = CHECKERS[name](entry["host"], entry["port"])
        if reason is None:
            log(f"{label}: reusing the throwaway server started earlier on {entry['host']}:{entry['port']}")
            return url_for(name, entry["host"], entry["port"])
        log(
            f"{label}: the throwaway server on port {entry['port']} runs but does not answer ({reason}); "
            "replacing it"
        )
    if entry:
        stop(name, entry)
        state.pop(name, None)
        save_state(state)
    if no_start:
        raise ServiceError(f"{label} is not reachable (set {var}, or run `make services`)")
    new = STARTERS[name](timeout)
    state[name] = new
    save_state(state)
    return url_for(name, new["host"], new["port"])
