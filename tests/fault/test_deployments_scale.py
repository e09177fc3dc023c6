"""Three managers scale 50 deployments at once and behave as one: a replica is never created twice.

Why this exists: the contract (section 6) promises that several managers on one database never make
more live replicas than the target and never count a route twice. Each replica slot has one creation
key (the deployment's `replica_seq`, claimed by a guarded update; the route is its session's
`creation_id`); this test puts that under concurrent scaling through all three managers' APIs, with a
hollow fleet and a real `sokovan proxy` probing every route, and checks the promise in every database
snapshot taken while it runs, then that every deployment ends at its last target, all HEALTHY.

What "never more than the target" means while targets move: a deployment's live routes (PROVISIONING,
HEALTHY, UNHEALTHY, DEGRADED) may exceed the *current* target for a while after it was lowered (the
next scaling cycle takes the extra ones out of service: TERMINATING, their sessions still live until
they end, so sessions are counted through their routes). Each snapshot checks live routes, and the
live sessions of live routes, against the highest target that can still be in effect: the stored
target, the target the deployment last finished scaling to (`scaled_to`: right after a scaling run,
live routes are at most that), and, while it is SCALING, every target the test set that may have been
current since it entered SCALING (the scaling run in flight read one of them, and may have added
routes for it before recording `scaled_to`). Only that run adds routes, so a second manager adding
the same shortfall again would exceed the bound (checked: with the deployment lane's lock and the
`replica_seq` guard removed, the first snapshots already show doubled routes).
Times compare the test's clock with the managers' (`status_changed_at`): one machine, one clock.
Also in every snapshot: `replica_seq` equals the deployment's routes and no replica number repeats;
no session is linked to two routes; every replica session is the one its route's creation key made
(`route:<id>`), and none outlives its route (alive while the route is TERMINATED); and every 10th
snapshot, the allocation invariants (`check_invariants`).

Sizes (CI on 2 cores; the module runs in 1-2 minutes): 3 managers, 50 hollow agents
(cpu=8, mem=32g each), 1 proxy, 50 deployments with targets in 0..4 (at most 200 replicas of
cpu 0.1, mem 64m), 4 scaling requests per deployment at random moments over ~10 s, probes every 0.5 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from sokovan.common.settings import Settings
from sokovan.harness import ManagerProc, ProxyProc, wait_agents
from tests.fault.harness import AgentProc, Api, InvariantChecker

pytestmark = pytest.mark.many_connections  # three managers: about 65 connections

MANAGERS = 3
AGENTS = 50
SLOTS = "cpu=8,mem=32g"
DEPLOYMENTS = 50
MAX_REPLICAS = 4
SCALES = 4  # PATCHes per deployment
GAP = (0.5, 3.0)  # seconds between two PATCHes of one deployment
SAMPLE_EVERY = 0.1
SETTLE = 120.0
SEED = 20261122
RESOURCES = {"cpu": "0.1", "mem": "64m"}
HEALTH = {
    "path": "/health",
    "interval": 0.5,
    "timeout": 1.0,
    "healthy_threshold": 2,
    "unhealthy_threshold": 3,
}
LIVE = ("PROVISIONING", "HEALTHY", "UNHEALTHY", "DEGRADED")
ENDED_SESSION = ("TERMINATED", "ERROR", "CANCELLED")


@dataclass
class Targets:
    """The targets the test set for one deployment, in order: (sent, answered, replicas), in epoch
    seconds.

    PATCHes of one deployment are sequential, so they commit in this order; a PATCH not answered yet
    has `answered` = inf."""

    entries: list[tuple[float, float, int]] = field(default_factory=list)

    def sent(self, replicas: int) -> int:
        self.entries.append((time.time(), float("inf"), replicas))
        return len(self.entries) - 1

    def answered(self, index: int) -> None:
        sent, _, replicas = self.entries[index]
        self.entries[index] = (sent, time.time(), replicas)

    def possibly_current(self, begin: float, end: float) -> list[int]:
        """Targets that may have been the stored one at some moment in [begin, end]: sent before
        `end`, and not surely replaced before `begin` (the next PATCH was answered after it)."""
        entries = list(self.entries)
        out = []
        for i, (sent, _, replicas) in enumerate(entries):
            replaced = entries[i + 1][1] if i + 1 < len(entries) else float("inf")
            if sent <= end and replaced >= begin:
                out.append(replicas)
        return out

    @property
    def last(self) -> int:
        return self.entries[-1][2]


SNAPSHOT_SQL = {
    "deployments": "SELECT id, replicas, status, status_info->'scaled_to' AS scaled_to, replica_seq, "
    "extract(epoch FROM status_changed_at) AS changed FROM deployments",
    "routes": "SELECT id, deployment_id, status, session_id, status_info->>'replica' AS replica FROM routes",
    "sessions": "SELECT id, deployment_id, status, creation_id FROM sessions WHERE deployment_id IS NOT NULL",
}


class ReplicaSampler:
    """Reads deployments, routes and replica sessions in one REPEATABLE READ snapshot every
    `SAMPLE_EVERY` seconds and keeps every broken invariant (with the time it was seen); the
    allocation invariants (`check_invariants`) are checked every 10th sample."""

    def __init__(self, db_url: str, targets: dict[uuid.UUID, Targets]) -> None:
        self.engine = create_async_engine(db_url, isolation_level="REPEATABLE READ", pool_size=2)
        self.allocation = InvariantChecker(db_url)
        self.targets = targets
        self.samples = 0
        self.violations: list[tuple[float, str]] = []
        # The most live routes seen above the stored target (allowed for a while after lowering it).
        self.most_over_target = 0
        self.most_live_sessions = 0
        self._began = time.monotonic()
        self._epoch = time.time()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._began = time.monotonic()
        self._epoch = time.time()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self.sample()
            if self.samples % 10 == 0:
                for problem in await self.allocation.check():
                    self._violation(f"allocation: {problem}")
            await asyncio.sleep(SAMPLE_EVERY)

    def _timeline(self, did: uuid.UUID) -> list[tuple[float, float, int]]:
        """The targets set, with their send and answer times relative to the sampler's start."""
        entries = self.targets[did].entries if did in self.targets else []
        return [(round(s - self._epoch, 2), round(a - self._epoch, 2), n) for s, a, n in entries]

    def _violation(self, what: str) -> None:
        self.violations.append((round(time.monotonic() - self._began, 2), what))

    async def sample(self) -> None:
        began = time.time()
        async with self.engine.connect() as conn, conn.begin():
            rows = {k: (await conn.execute(text(sql))).all() for k, sql in SNAPSHOT_SQL.items()}
        ended = time.time()
        self.samples += 1
        routes_of: dict[uuid.UUID, list[Any]] = defaultdict(list)
        for r in rows["routes"]:
            routes_of[r.deployment_id].append(r)
        sessions_of: dict[uuid.UUID, list[Any]] = defaultdict(list)
        for s in rows["sessions"]:
            sessions_of[s.deployment_id].append(s)
        linked = Counter(r.session_id for r in rows["routes"] if r.session_id is not None)
        for sid, n in linked.items():
            if n > 1:
                self._violation(f"session {sid} is the replica of {n} routes")
        live_sessions_total = 0
        for d in rows["deployments"]:
            routes = routes_of.get(d.id, [])
            sessions = sessions_of.get(d.id, [])
            live = [r for r in routes if r.status in LIVE]
            allowed = [d.replicas]
            if d.scaled_to is not None:
                allowed.append(int(d.scaled_to))
            since = min(began, float(d.changed)) if d.status in ("PENDING", "SCALING") else began
            if d.id in self.targets:
                allowed += self.targets[d.id].possibly_current(since, ended)
            bound = max(allowed)
            self.most_over_target = max(self.most_over_target, len(live) - d.replicas)
            if len(live) > bound:
                self._violation(
                    f"deployment {d.id}: {len(live)} live routes > {bound} (stored target {d.replicas},"
                    f" scaled_to {d.scaled_to}, {d.status} for {ended - float(d.changed):.1f}s, possibly"
                    f" current {allowed[1:]}); {_statuses(routes)}; targets {self._timeline(d.id)}"
                )
            # Each replica number is claimed once, and makes exactly one route.
            if d.replica_seq != len(routes):
                self._violation(f"deployment {d.id}: replica_seq {d.replica_seq} but {len(routes)} routes")
            numbers = [r.replica for r in routes]
            if len(set(numbers)) != len(numbers):
                self._violation(f"deployment {d.id}: a replica number twice: {sorted(numbers)}")
            # A replica session belongs to exactly one route of its deployment (its creation key).
            by_key = {f"route:{r.id}": r for r in routes}
            if len(sessions) > len(routes):
                self._violation(f"deployment {d.id}: {len(sessions)} replica sessions, {len(routes)} routes")
            for s in sessions:
                route = by_key.get(s.creation_id or "")
                if route is None:
                    self._violation(f"session {s.id} of {d.id} has no route ({s.creation_id})")
                    continue
                if route.session_id is not None and route.session_id != s.id:
                    self._violation(f"route {route.id} links {route.session_id}, its key made {s.id}")
                if s.status not in ENDED_SESSION:
                    live_sessions_total += 1
                    if route.status == "TERMINATED":
                        self._violation(f"session {s.id} is {s.status} but its route {route.id} TERMINATED")
            live_of_live = sum(
                1
                for s in sessions
                if s.status not in ENDED_SESSION
                and s.creation_id in by_key
                and by_key[s.creation_id].status in LIVE
            )
            if live_of_live > bound:
                self._violation(f"deployment {d.id}: {live_of_live} live sessions of live routes > {bound}")
        self.most_live_sessions = max(self.most_live_sessions, live_sessions_total)

    async def stop(self) -> None:
        if self._task is not None:
            if self._task.done() and not self._task.cancelled() and self._task.exception() is not None:
                self._violation(f"the sampler failed: {self._task.exception()!r}")
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.engine.dispose()
        await self.allocation.close()


def _statuses(routes: list[Any]) -> dict[str, int]:
    return dict(sorted(Counter(r.status for r in routes).items()))


async def _settled(db_url: str, final: dict[uuid.UUID, int]) -> list[str]:
    """What still differs from the end state: READY, exactly the target of live routes, all HEALTHY,
    and exactly the target of replica sessions not ended (none left over from scaling down)."""
    engine = create_async_engine(db_url, isolation_level="REPEATABLE READ", pool_size=1)
    try:
        async with engine.connect() as conn, conn.begin():
            rows = {k: (await conn.execute(text(sql))).all() for k, sql in SNAPSHOT_SQL.items()}
    finally:
        await engine.dispose()
    deployments = {d.id: d for d in rows["deployments"]}
    routes_of: dict[uuid.UUID, list[Any]] = defaultdict(list)
    for r in rows["routes"]:
        routes_of[r.deployment_id].append(r)
    live_sessions: Counter[uuid.UUID] = Counter(
        s.deployment_id for s in rows["sessions"] if s.status not in ENDED_SESSION
    )
    wrong = []
    for did, target in final.items():
        d = deployments[did]
        live = [r for r in routes_of[did] if r.status in LIVE]
        healthy = [r for r in live if r.status == "HEALTHY"]
        if not (
            d.status == "READY"
            and d.replicas == target
            and len(live) == len(healthy) == target
            and live_sessions[did] == target
        ):
            wrong.append(
                f"{did}: {d.status}, target {d.replicas} (want {target}), routes {_statuses(routes_of[did])},"
                f" live sessions {live_sessions[did]}"
            )
    return wrong


async def test_three_managers_scale_fifty_deployments_without_an_extra_replica(
    fresh_cluster_state: str, service_env: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    managers = [ManagerProc(service_env, tmp_path, f"manager-{n}") for n in range(MANAGERS)]
    proxy = ProxyProc(service_env, tmp_path)
    fleet: AgentProc | None = None
    targets: dict[uuid.UUID, Targets] = {}
    sampler = ReplicaSampler(settings.db_url, targets)
    try:
        for m in managers:
            m.start()
        fleet = AgentProc(service_env, tmp_path, "serve", SLOTS, simulate=AGENTS)
        proxy.start()
        for m in managers:
            await m.wait_healthy()
        await asyncio.to_thread(proxy.wait_up)
        await wait_agents(settings.db_url, AGENTS, watch=[*managers, fleet, proxy])
        began = time.monotonic()
        sampler.start()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            api = Api(http, [m.api for m in managers], fresh_cluster_state)

            async def create(i: int) -> None:
                replicas = rng.randint(0, MAX_REPLICAS)
                body = {
                    "name": f"scale-{i:02d}",
                    "type": "custom",
                    "replicas": replicas,
                    "image": "shell",
                    "command": "sleep 3600",
                    "resources": RESOURCES,
                    "health_check": HEALTH,
                }
                sent = time.time()
                status, data = await api.call("POST", "/v2/deployments", body, api=i % MANAGERS)
                assert status == 201, (status, data)
                did = uuid.UUID(data["id"])
                # The creation's target: "sent" as early as the POST, already answered.
                targets[did] = Targets([(sent, time.time(), replicas)])

            await asyncio.gather(*(create(i) for i in range(DEPLOYMENTS)))
            created = time.monotonic() - began

            async def scale(did: uuid.UUID) -> None:
                for _ in range(SCALES):
                    await asyncio.sleep(rng.uniform(*GAP))
                    replicas = rng.randint(0, MAX_REPLICAS)
                    index = targets[did].sent(replicas)
                    status, data = await api.call(
                        "PATCH", f"/v2/deployments/{did}", {"replicas": replicas}, api=rng.randrange(MANAGERS)
                    )
                    assert status == 200, (status, data)
                    targets[did].answered(index)

            await asyncio.gather(*(scale(did) for did in list(targets)))
            scaled = time.monotonic() - began
            final = {did: t.last for did, t in targets.items()}

            deadline = time.monotonic() + SETTLE
            while wrong := await _settled(settings.db_url, final):
                for daemon in (*managers, fleet, proxy):
                    assert daemon.failure() is None, daemon.failure()
                assert time.monotonic() < deadline, (
                    f"{len(wrong)} deployments not settled {SETTLE}s after the last scale: {wrong[:5]}"
                )
                await asyncio.sleep(0.5)
            settled = time.monotonic() - began
            await sampler.stop()

            # The API says the same: READY, ready_replicas = target, exactly that many HEALTHY routes.
            for did, target in final.items():
                status, d = await api.call("GET", f"/v2/deployments/{did}", api=rng.randrange(MANAGERS))
                assert status == 200, d
                assert (d["status"], d["replicas"], d["ready_replicas"]) == ("READY", target, target), d
                status, page = await api.call("GET", f"/v2/deployments/{did}/routes?limit=500")
                assert status == 200, page
                healthy = [r for r in page["items"] if r["status"] == "HEALTHY"]
                assert len(healthy) == target, page["items"]
                assert len({r["session_id"] for r in healthy}) == target

        print(
            f"\n{DEPLOYMENTS} deployments created in {created:.1f}s, {SCALES} scales each done by "
            f"{scaled:.1f}s, all settled at {settled:.1f}s ({sum(final.values())} replicas)"
        )
        print(
            f"samples: {sampler.samples}, violations: {len(sampler.violations)}, most live routes over "
            f"the stored target: {sampler.most_over_target}, "
            f"most live replica sessions: {sampler.most_live_sessions}"
        )
        for when, what in sampler.violations[:20]:
            print(f"violation at {when}s: {what}")
        assert sampler.samples > 50
        assert sampler.violations == [], sampler.violations[:10]
        checker = InvariantChecker(settings.db_url)
        try:
            assert await checker.check() == []
        finally:
            await checker.close()
        for daemon in (*managers, fleet, proxy):
            assert daemon.failure() is None, daemon.failure()
    finally:
        await sampler.stop()
        for m in managers:  # first, so that no manager sees the fleet go and fails its kernels
            m.stop()
        if fleet is not None:
            fleet.stop()
        proxy.stop()
