"""Preemption (CONTRACT section 9) with real daemons: a manager and process agents, REST v2 only.

One manager serves the module, with the harness's fast timings (long cycle 0.5 s). Each test has
its own scaling group with its own `preemption` settings and its own process agent of cpu=4, so
that victims, preemptors and reservations of one test never meet another's. Victims are batch
sessions of priority 5 running shell loops; preemptors are an admin's sessions of priority 50.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from sokovan.common.settings import Settings
from sokovan.harness import ManagerProc, bootstrap_admin, check_alive, stop_all, wait_agents
from tests.fault.harness import TERMINAL, AgentProc, clear_timings, outcome, reset_cluster_state

T = TypeVar("T")

SLOTS = "cpu=4,mem=4g"
SLEEP = "sleep 3600"
# A victim that stops at once on TERM, saying so; one that ignores TERM (killed after the grace).
TRAPS_TERM = "trap 'echo got TERM; exit 0' TERM; while true; do sleep 0.1; done"
IGNORES_TERM = "trap '' TERM; while true; do sleep 0.1; done"
PROMPTLY = 20.0  # seconds within which a decision due now is seen (cycles of 0.5 s, polls, start-up)
QUIET = 4.0  # seconds a "never" case is watched for a preemption that must not come


@dataclass
class Cluster:
    manager: ManagerProc
    token: str
    settings: Settings
    env: dict[str, str]


@pytest.fixture(scope="module")
def cluster(
    settings: Settings, service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    asyncio.run(reset_cluster_state(settings))
    manager = ManagerProc(service_env, tmp_path_factory.mktemp("preemption"))
    try:
        token = bootstrap_admin(service_env)
        manager.start()
        manager.wait_up()
        yield Cluster(manager, token, settings, service_env)
    finally:
        manager.stop()
        asyncio.run(clear_timings(settings))


async def until(probe: Callable[[], Awaitable[T]], ok: Callable[[T], bool], what: str, within: float) -> T:
    began = time.monotonic()
    while True:
        value = await probe()
        if ok(value):
            return value
        if time.monotonic() - began > within:
            raise AssertionError(f"{what}: not within {within}s; last seen: {value}")
        await asyncio.sleep(0.2)


@dataclass
class Group:
    """One test's scaling group, its process agent, and REST v2 as the admin (or another token)."""

    cluster: Cluster
    http: aiohttp.ClientSession
    name: str
    work: Path
    agents: list[AgentProc] = field(default_factory=list)

    async def call(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token or self.cluster.token}"}
        async with self.http.request(
            method, f"{self.cluster.manager.api}{path}", json=body, headers=headers
        ) as r:
            raw = await r.text()
            return r.status, (json.loads(raw) if raw else None)

    async def ok(
        self, method: str, path: str, body: Any = None, status: int = 200, token: str | None = None
    ) -> Any:
        got, data = await self.call(method, path, body, token)
        assert got == status, f"{method} {path} {body}: {got} {data}"
        return data

    async def start_agent(self) -> str:
        agent = AgentProc(
            self.cluster.env, self.work, f"{self.name}-a", SLOTS, extra=["--scaling-group", self.name]
        )
        self.agents.append(agent)
        await wait_agents(self.cluster.settings.db_url, 1, ids=[agent.agent_id], watch=[agent])
        await until(
            lambda: self.ok("GET", f"/v2/agents/{agent.agent_id}"),
            lambda a: a["status"] == "READY",
            f"{agent.agent_id} READY",
            PROMPTLY,
        )
        return agent.agent_id

    def body(self, cpu: int, priority: int, command: str = SLEEP, **extra: Any) -> dict[str, Any]:
        return {
            "image": "shell",
            "type": "batch",
            "command": command,
            "resources": {"cpu": cpu, "mem": "64m"},
            "scaling_group": self.name,
            "priority": priority,
            **extra,
        }

    async def create(
        self, cpu: int, priority: int, command: str = SLEEP, token: str | None = None, **extra: Any
    ) -> str:
        data = await self.ok("POST", "/v2/sessions", self.body(cpu, priority, command, **extra), 201, token)
        return str(data["id"])

    async def dry_run(self, cpu: int, priority: int) -> dict[str, Any]:
        data: dict[str, Any] = await self.ok("POST", "/v2/sessions?dry_run=true", self.body(cpu, priority))
        return data

    async def session(self, sid: str) -> dict[str, Any]:
        data: dict[str, Any] = await self.ok("GET", f"/v2/sessions/{sid}")
        return data

    async def wait(
        self, sid: str, ok: Callable[[dict[str, Any]], bool], what: str, within: float = PROMPTLY
    ) -> dict[str, Any]:
        check_alive([self.cluster.manager, *self.agents])
        return await until(lambda: self.session(sid), ok, f"session {sid} {what}", within)

    async def running(self, sid: str) -> dict[str, Any]:
        def is_running(s: dict[str, Any]) -> bool:
            assert s["status"] not in TERMINAL, f"{sid} ended {outcome(s)}: {s['status_info']}"
            return bool(s["status"] == "RUNNING")

        return await self.wait(sid, is_running, "RUNNING")

    async def ended(self, sid: str, within: float = PROMPTLY) -> dict[str, Any]:
        return await self.wait(sid, lambda s: s["status"] in TERMINAL, "ended", within)

    async def preemptions(self) -> float:
        async with self.http.get(f"{self.cluster.manager.api}/metrics") as resp:
            text = await resp.text()
        match = re.search(r"^sokovan_preemptions_total (\S+)$", text, re.M)
        return float(match.group(1)) if match else 0.0

    async def clean_up(self) -> None:
        status, data = await self.call("GET", f"/v2/sessions?scaling_group={self.name}&limit=500")
        for s in data.get("items", []) if status == 200 else []:
            if s["status"] not in TERMINAL:
                await self.call("DELETE", f"/v2/sessions/{s['id']}?forced=true")
        stop_all(self.agents, 30)


@pytest.fixture
async def group(cluster: Cluster, tmp_path: Path) -> AsyncIterator[Group]:
    name = f"pre-{uuid.uuid4().hex[:6]}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        g = Group(cluster, http, name, tmp_path)
        await g.ok("POST", "/v2/scaling-groups", {"name": name}, status=201)
        try:
            yield g
        finally:
            await g.clean_up()


async def _with_preemption(g: Group, mode: str, grace: float) -> None:
    data = await g.ok(
        "PATCH", f"/v2/scaling-groups/{g.name}", {"preemption": {"mode": mode, "grace_period": grace}}
    )
    assert data["preemption"] == {"mode": mode, "grace_period": grace}, data


async def _fill(g: Group, count: int, cpu: int = 1, priority: int = 5, command: str = SLEEP) -> list[str]:
    """`count` victims created one after another, each RUNNING before the next (so "newest" is clear)."""
    ids = []
    for _ in range(count):
        sid = await g.create(cpu, priority, command)
        await g.running(sid)
        ids.append(sid)
    return ids


async def test_terminate_preempts_exactly_the_two_newest(group: Group) -> None:
    agent = await group.start_agent()
    await _with_preemption(group, "terminate", 2)
    victims = await _fill(group, 4)
    before = await group.preemptions()

    plan = await group.dry_run(cpu=2, priority=50)
    assert plan["placeable"] is True, plan
    assert sorted(plan["preempts"]) == sorted(victims[2:]), plan
    assert plan["agents"] == [agent], plan

    preemptor = await group.create(2, 50)
    placed = await group.running(preemptor)
    assert {k["agent_id"] for k in placed["kernels"]} == {agent}
    for sid in victims[2:]:
        done = await group.ended(sid)
        assert (done["status"], done["result"]) == ("TERMINATED", None), outcome(done)
        assert done["status_info"]["cause"] == "PREEMPTED", done["status_info"]
        assert done["status_info"]["preempted_by"] == preemptor, done["status_info"]
    for sid in victims[:2]:
        assert (await group.session(sid))["status"] == "RUNNING"
    assert await group.preemptions() == before + 2


async def test_grace_lets_a_victim_finish_and_kills_one_that_ignores_term(group: Group) -> None:
    agent = await group.start_agent()
    await _with_preemption(group, "terminate", 4)
    (trapper,) = await _fill(group, 1, cpu=2, command=TRAPS_TERM)
    (ignorer,) = await _fill(group, 1, cpu=2, command=IGNORES_TERM)

    preemptor = await group.create(4, 50)
    waiting = await group.wait(
        preemptor, lambda s: bool(s["status_info"].get("nominated_agents")), "nominated"
    )
    assert waiting["status"] == "PENDING", waiting
    assert waiting["status_info"]["nominated_agents"] == [agent], waiting["status_info"]
    assert ignorer in (waiting["status_info"].get("pending_reason") or ""), waiting["status_info"]

    terminating = await group.wait(ignorer, lambda s: s["status"] == "TERMINATING", "TERMINATING")
    seen_terminating = time.monotonic()
    assert terminating["status_info"]["cause"] == "PREEMPTED"

    trapped = await group.ended(trapper)
    assert trapped["status_info"]["cause"] == "PREEMPTED", trapped["status_info"]
    logs = await group.ok("GET", f"/v2/sessions/{trapper}/logs")
    assert "got TERM" in logs["items"][0]["stdout"], logs

    killed = await group.ended(ignorer, within=30)
    lived = time.monotonic() - seen_terminating
    assert lived >= 2.0, f"a victim ignoring TERM was gone {lived:.1f}s after TERMINATING (grace 4 s)"
    assert killed["status_info"]["cause"] == "PREEMPTED"
    await group.running(preemptor)


async def test_requeue_returns_the_victims_to_pending_and_runs_them_again(group: Group) -> None:
    await group.start_agent()
    await _with_preemption(group, "requeue", 1)
    victims = await _fill(group, 2, cpu=2)
    old_kernels = {sid: {k["id"] for k in (await group.session(sid))["kernels"]} for sid in victims}

    preemptor = await group.create(4, 50, command="sleep 3")
    await group.running(preemptor)
    for sid in victims:
        back = await group.wait(sid, lambda s: s["status"] == "PENDING", "PENDING again")
        assert back["status_info"].get("preempted_count") == 1, back["status_info"]
    assert (await group.ended(preemptor))["result"] == "SUCCESS"
    for sid in victims:
        again = await group.running(sid)
        assert again["id"] == sid and again["priority"] == 5
        assert {k["id"] for k in again["kernels"]}.isdisjoint(old_kernels[sid]), (
            "requeued with its old kernels"
        )
        assert again["status_info"].get("preempted_count") == 1


async def test_a_requeue_victim_terminated_by_its_user_ends_instead(group: Group) -> None:
    await group.start_agent()
    await _with_preemption(group, "requeue", 3)
    (victim,) = await _fill(group, 1, cpu=4, command=IGNORES_TERM)
    preemptor = await group.create(4, 50)
    await group.wait(victim, lambda s: s["status"] == "TERMINATING", "TERMINATING")
    await group.ok("DELETE", f"/v2/sessions/{victim}", status=202)
    done = await group.ended(victim, within=30)
    assert (done["status"], done["result"]) == ("TERMINATED", None), outcome(done)
    assert done["status_info"]["cause"] == "USER_CANCELLED", done["status_info"]
    await group.running(preemptor)
    assert (await group.session(victim))["status"] == "TERMINATED", "requeued although its user ended it"


async def _never(group: Group, preemptor: str, victims: list[str], before: float) -> None:
    """For QUIET seconds: the preemptor PENDING with a reason, every victim RUNNING, no preemption."""
    deadline = time.monotonic() + QUIET
    while time.monotonic() < deadline:
        waiting = await group.session(preemptor)
        assert waiting["status"] == "PENDING", waiting
        for sid in victims:
            assert (await group.session(sid))["status"] == "RUNNING", sid
        await asyncio.sleep(0.5)
    assert (await group.session(preemptor))["status_info"].get("pending_reason")
    assert await group.preemptions() == before


async def test_never_for_equal_priority(group: Group) -> None:
    await group.start_agent()
    await _with_preemption(group, "terminate", 1)
    victims = await _fill(group, 2, cpu=2, priority=10)
    before = await group.preemptions()
    assert (await group.dry_run(cpu=2, priority=10))["preempts"] == []
    await _never(group, await group.create(2, 10), victims, before)


async def test_never_for_non_preemptible_sessions(group: Group) -> None:
    await group.start_agent()
    await _with_preemption(group, "terminate", 1)
    victims = [await group.create(2, 5, preemptible=False)]
    victims.append(await group.create(2, 5, type="interactive", command=None))
    for sid in victims:
        shown = await group.running(sid)
        assert shown["preemptible"] is False, shown
    before = await group.preemptions()
    await _never(group, await group.create(2, 50), victims, before)


async def test_never_when_the_group_mode_is_off(group: Group) -> None:
    await group.start_agent()
    shown = await group.ok("GET", f"/v2/scaling-groups/{group.name}")
    assert shown["preemption"]["mode"] == "off", shown
    victims = await _fill(group, 2, cpu=2)
    before = await group.preemptions()
    assert (await group.dry_run(cpu=2, priority=50))["preempts"] == []
    await _never(group, await group.create(2, 50), victims, before)


async def test_never_for_a_preemptor_over_its_own_quota(group: Group) -> None:
    """The preemptor's keypair may hold cpu=2 and already holds cpu=1: it waits for its quota."""
    await group.start_agent()
    await _with_preemption(group, "terminate", 1)
    policy = f"tiny-{group.name}"
    await group.ok(
        "PUT", f"/v2/resource-policies/{policy}", {"total_resource_slots": {"cpu": "2", "mem": "1g"}}
    )
    keys = await group.ok(
        "POST",
        "/v2/keypairs",
        {"user": f"ops-{group.name}", "project": "default", "role": "admin", "resource_policy": policy},
        status=201,
    )
    own = await group.create(1, 50, token=keys["token"])
    await group.running(own)
    victims = await _fill(group, 3, cpu=1)
    before = await group.preemptions()
    await _never(group, await group.create(2, 50, token=keys["token"]), [own, *victims], before)


async def test_never_to_no_avail(group: Group) -> None:
    """Every preemptible victim released would free cpu=2; the preemptor needs cpu=4."""
    await group.start_agent()
    await _with_preemption(group, "terminate", 1)
    victims = await _fill(group, 2, cpu=1)
    keeper = await group.create(2, 5, preemptible=False)
    await group.running(keeper)
    before = await group.preemptions()
    assert (await group.dry_run(cpu=4, priority=50))["preempts"] == []
    await _never(group, await group.create(4, 50), [*victims, keeper], before)


async def test_the_freed_room_is_held_for_the_preemptor(group: Group) -> None:
    """A victim of cpu=1 ends at once, one of cpu=2 ignores TERM through its grace: the cpu that is
    free meanwhile is the preemptor's, not a priority-5 session's created after the choice."""
    await group.start_agent()
    await _with_preemption(group, "terminate", 4)
    keeper = await group.create(1, 5, preemptible=False)
    await group.running(keeper)
    (quick,) = await _fill(group, 1, cpu=1)
    (slow,) = await _fill(group, 1, cpu=2, command=IGNORES_TERM)

    preemptor = await group.create(3, 50)
    await group.wait(preemptor, lambda s: bool(s["status_info"].get("nominated_agents")), "nominated")
    await group.ended(quick)
    latecomer = await group.create(1, 5)
    while (await group.session(slow))["status"] not in TERMINAL:
        assert (await group.session(latecomer))["status"] == "PENDING", "the held room was taken"
        await asyncio.sleep(0.2)
    await group.running(preemptor)
    assert (await group.session(latecomer))["status"] == "PENDING"
