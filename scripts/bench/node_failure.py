"""The node-failure phase of `make bench`: part of the fleet dies at once under load.

The fleet runs as two processes: the doomed agents (`b-doomed-NNNN`, first in id order, so the
concentrated selector fills them first) and the rest. With every session of the burst RUNNING, the
doomed process is SIGKILLed; the phase measures how long until every doomed agent is DOWN and until
every session that ran on them has a retry RUNNING on another agent. The cluster's node timings and
retry default are set in etcd for the run (`TIMINGS`, `RETRY_DEFAULT`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import aetcd
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.harness import AgentProc

DOOMED_PREFIX = "b-doomed"
TIMINGS = {
    "heartbeat_interval": 2.0,
    "heartbeat_timeout": 6.0,
    "grace_period": {"standard": 4.0, "sensitive": 4.0, "borrowed": 4.0},
    "boot_timeout": 120.0,
}
RETRY_DEFAULT = {"max_retries": 2, "retry_delay": 1.0}


async def configure(env: Mapping[str, str], lifecycle: Mapping[str, Any] = TIMINGS) -> None:
    """The run's node timings (`lifecycle`) and retry default, in etcd under the run's prefix."""
    host, _, port = env.get("SOKOVAN_ETCD", "127.0.0.1:2379").rpartition(":")
    prefix = env["SOKOVAN_ETCD_PREFIX"]
    client = aetcd.Client(host=host or "127.0.0.1", port=int(port))
    try:
        await client.put(f"{prefix}/config/manager/node_lifecycle".encode(), json.dumps(lifecycle).encode())
        await client.put(
            f"{prefix}/config/manager/retry_policy_default".encode(), json.dumps(RETRY_DEFAULT).encode()
        )
    finally:
        await client.close()


_AFFECTED = text(
    """
    SELECT DISTINCT s.id FROM sessions s JOIN kernels k ON k.session_id = s.id
    WHERE s.status = 'RUNNING' AND k.agent_id LIKE :doomed
    """
)
_NOT_BACK = text(
    """
    SELECT count(*) FROM sessions p WHERE p.id = ANY(:ids) AND NOT EXISTS (
        SELECT 1 FROM sessions c WHERE c.parent_session_id = p.id AND c.status = 'RUNNING')
    """
)
_NOT_DOWN = text("SELECT count(*) FROM agents WHERE id LIKE :doomed AND status <> 'DOWN'")


async def node_failure_phase(engine: AsyncEngine, doomed: AgentProc, within: float = 600) -> dict[str, Any]:
    pattern = f"{DOOMED_PREFIX}-%"
    async with engine.connect() as conn:
        affected = list((await conn.execute(_AFFECTED, {"doomed": pattern})).scalars())
    start = time.perf_counter()
    await asyncio.to_thread(doomed.kill)
    all_down: float | None = None
    while True:
        async with engine.connect() as conn:
            if all_down is None and not await conn.scalar(_NOT_DOWN, {"doomed": pattern}):
                all_down = time.perf_counter() - start
            left = await conn.scalar(_NOT_BACK, {"ids": affected})
        if not left and all_down is not None:
            break
        if time.perf_counter() - start > within:
            raise RuntimeError(
                f"{left} sessions of the killed agents were not running again within {within}s"
            )
        await asyncio.sleep(0.25)
    return {
        "node_failure_affected_sessions": len(affected),
        "node_failure_all_down_s": all_down,
        "node_failure_all_running_again_s": time.perf_counter() - start,
    }
