"""Real daemons for fault tests: managers that can be SIGKILLed and restarted, agents, fast timings.

Everything here talks to the cluster the way an operator would (processes, etcd keys, REST v2);
the database is read only to check the allocation invariants. The daemons themselves are
sokovan.harness's `ManagerProc` (restartable on its port, `kill()` for SIGKILL) and `AgentProc`;
what is the fault tests' own is the fast timings, the invariant checks and the retrying client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aetcd
import aiohttp
import redis.asyncio as aioredis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from sokovan import harness
from sokovan.common.settings import Settings
from sokovan.orchestrator.provisioner.invariants import check_invariants

# Fast self-healing, written to etcd before the daemons start (the test brief's timings).
LOOPS = {"long_cycle_interval": 0.5}
MAINTENANCE = {"reconcile_after": 1.0}
NODE_LIFECYCLE = {
    "heartbeat_interval": 0.5,
    "heartbeat_timeout": 3.0,
    "grace_period": {"standard": 2.0, "sensitive": 2.0, "borrowed": 2.0},
    "boot_timeout": 30.0,
}
HEARTBEAT = "0.5"
TERMINAL = {"TERMINATED", "ERROR", "CANCELLED"}


async def reset_cluster_state(settings: Settings) -> None:
    """Empty tables, no leftover Redis streams of this run, and the fast timings in etcd."""
    await harness.truncate_tables(settings.db_url)
    await _clear_streams(settings)
    etcd = aetcd.Client(host=settings.etcd_host, port=settings.etcd_port)
    try:
        for section, value in (
            ("loops", LOOPS),
            ("maintenance", MAINTENANCE),
            ("node_lifecycle", NODE_LIFECYCLE),
        ):
            await etcd.put(_key(settings, section), json.dumps(value).encode())
    finally:
        await etcd.close()


async def clear_timings(settings: Settings) -> None:
    """Leave etcd as other test modules expect it (the default timings), and no Redis streams."""
    await _clear_streams(settings)
    etcd = aetcd.Client(host=settings.etcd_host, port=settings.etcd_port)
    try:
        for section in ("loops", "maintenance", "node_lifecycle"):
            await etcd.delete(_key(settings, section))
    finally:
        await etcd.close()


async def _clear_streams(settings: Settings) -> None:
    client = aioredis.Redis.from_url(settings.redis_url)
    keys = [k async for k in client.scan_iter(match=f"{settings.etcd_prefix}*", count=1000)]
    if keys:
        await client.delete(*keys)
    await client.aclose()


async def put_config(settings: Settings, section: str, value: Any) -> None:
    """Write one section under `<prefix>/config/manager/` as an operator would with etcdctl: `value`
    as JSON, or bytes as they are (to write something invalid)."""
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    etcd = aetcd.Client(host=settings.etcd_host, port=settings.etcd_port)
    try:
        await etcd.put(_key(settings, section), raw)
    finally:
        await etcd.close()


def _key(settings: Settings, section: str) -> bytes:
    return f"{settings.etcd_prefix}/config/manager/{section}".encode()


class AgentProc(harness.AgentProc):
    """`sokovan agent` (a real process agent or, with `simulate`, a hollow fleet), started at once,
    heartbeating every 0.5 s."""

    def __init__(
        self,
        env: dict[str, str],
        workdir: Path,
        agent_id: str,
        slots: str,
        *,
        simulate: int | None = None,
        extra: Iterable[str] = (),
    ) -> None:
        own = ["--heartbeat-interval", HEARTBEAT]
        if simulate is None:
            own += ["--kill-grace", "2"]
        work_dir = workdir / agent_id if simulate is None else None
        super().__init__(
            env, workdir, agent_id, slots=slots, work_dir=work_dir, simulate=simulate, extra=[*own, *extra]
        )
        self.start()

    def stop(self, timeout: float = 30) -> None:
        super().stop(timeout)


class InvariantChecker:
    """`check_invariants` over one consistent snapshot (REPEATABLE READ), so that a check never
    mixes rows from before and after a concurrent commit."""

    def __init__(self, db_url: str) -> None:
        self.engine = create_async_engine(db_url, isolation_level="REPEATABLE READ")

    async def check(self) -> list[str]:
        async with self.engine.connect() as conn:
            async with conn.begin():
                return await check_invariants(conn)

    async def close(self) -> None:
        await self.engine.dispose()


class Api:
    """REST v2 over several manager ports, tolerant of managers that are down (for retries)."""

    RETRYABLE = (aiohttp.ClientError, TimeoutError, ConnectionError)

    def __init__(self, http: aiohttp.ClientSession, apis: list[str], token: str) -> None:
        self.http = http
        self.apis = apis
        self.headers = {"Authorization": f"Bearer {token}"}
        self.failures: list[str] = []  # every try that was retried: what went wrong
        self.server_errors: list[str] = []  # those of them a manager answered with a 5xx

    async def call(self, method: str, path: str, body: Any = None, api: int = 0) -> tuple[int, Any]:
        base = self.apis[api % len(self.apis)]
        async with self.http.request(method, f"{base}{path}", json=body, headers=self.headers) as resp:
            raw = await resp.text()
            return resp.status, (json.loads(raw) if raw else None)

    async def create_retrying(
        self, body: dict[str, Any], api: int = 0, give_up_after: float = 120
    ) -> tuple[dict[str, Any], int, int]:
        """POST with the body's creation_id until a 200/201; returns (session, final status, tries)."""
        cid = body.get("creation_id")
        return await self._retrying(
            lambda: self.call("POST", "/v2/sessions", body, api),
            done=(200, 201),
            label=f"POST {cid}",
            what=f"creation {cid}",
            context=body,
            give_up_after=give_up_after,
        )

    async def delete_retrying(self, sid: str, api: int = 0, give_up_after: float = 60) -> None:
        label = f"DELETE {sid}"
        await self._retrying(
            lambda: self.call("DELETE", f"/v2/sessions/{sid}", api=api),
            done=(202,),
            label=label,
            what=label,
            context=sid,
            give_up_after=give_up_after,
        )

    async def _retrying(
        self,
        call: Callable[[], Awaitable[tuple[int, Any]]],
        *,
        done: tuple[int, ...],
        label: str,
        what: str,
        context: Any,
        give_up_after: float,
    ) -> tuple[Any, int, int]:
        """`call()` until it answers one of `done`, retrying what a manager that is down or restarting
        answers (no connection, a 5xx; anything else fails the test at once) and recording each
        failed try under `label`; (data, final status, tries)."""
        deadline = time.monotonic() + give_up_after
        tries = 0
        while True:
            tries += 1
            try:
                status, data = await call()
            except self.RETRYABLE as exc:
                status, data = -1, None
                self.failures.append(f"{label}: {exc!r}")
            if status in done:
                return data, status, tries
            assert status == -1 or status >= 500, (status, data, context)
            if status >= 500:
                self.failures.append(f"{label}: {status} {data}")
                self.server_errors.append(self.failures[-1])
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} failed for {give_up_after}s")
            await asyncio.sleep(0.2)

    async def list_all(self, api: int = 0) -> dict[str, dict[str, Any]]:
        """Every session, by id (pages of 500)."""
        found: dict[str, dict[str, Any]] = {}
        cursor: str | None = None
        while True:
            path = "/v2/sessions?limit=500" + (f"&cursor={quote(cursor)}" if cursor else "")
            status, data = await self.call("GET", path, api=api)
            assert status == 200, data
            for item in data["items"]:
                found[item["id"]] = item
            cursor = data["next_cursor"]
            if not cursor:
                return found


async def settle(
    api: Api, wanted: dict[str, Callable[[dict[str, Any]], bool]], within: float, poll: float = 1.0
) -> dict[str, dict[str, Any]]:
    """Until `wanted[sid](session)` holds for every session; fails at once on a session that ended
    otherwise, and after `within` seconds on any still elsewhere (with a summary of where)."""
    began = time.monotonic()
    while True:
        sessions = await api.list_all()
        missing = [sid for sid in wanted if sid not in sessions]
        assert not missing, f"{len(missing)} sessions missing from the list: {missing[:5]}"
        wrong = [sid for sid, ok in wanted.items() if not ok(sessions[sid])]
        ended = [(sid, outcome(sessions[sid])) for sid in wrong if sessions[sid]["status"] in TERMINAL]
        assert not ended, f"{len(ended)} sessions ended wrongly: {ended[:10]}"
        if not wrong:
            return sessions
        if time.monotonic() - began > within:
            raise AssertionError(
                f"{len(wrong)} sessions not settled after {within}s: "
                f"{summarize(sessions[sid] for sid in wrong)}; e.g. {sessions[wrong[0]]}"
            )
        await asyncio.sleep(poll)


def outcome(session: dict[str, Any]) -> tuple[str, str | None, str | None]:
    return session["status"], session["result"], (session["status_info"] or {}).get("cause")


def summarize(sessions: Iterable[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in sessions:
        key = "/".join(str(x) for x in outcome(s))
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


class InvariantSampler:
    """Checks the invariants every `interval` seconds in the background; keeps every violation."""

    def __init__(self, db_url: str, interval: float = 0.5) -> None:
        self.checker = InvariantChecker(db_url)
        self.interval = interval
        self.samples = 0
        self.violations: list[tuple[float, list[str]]] = []
        self.max_db_connections = 0  # to this database, by anyone (the managers, mostly)
        self._task: asyncio.Task[None] | None = None
        self._began = time.monotonic()

    def start(self) -> None:
        self._began = time.monotonic()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            problems = await self.checker.check()
            async with self.checker.engine.connect() as conn:
                n = await conn.scalar(
                    text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
                )
            self.max_db_connections = max(self.max_db_connections, int(n or 0))
            self.samples += 1
            if problems:
                self.violations.append((time.monotonic() - self._began, problems))
            await asyncio.sleep(self.interval)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.checker.close()
