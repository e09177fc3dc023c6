"""Node lifecycle (seed 002, CONTRACT section 7) with real daemons and short timers in etcd.

One manager serves the module. Each test has its own scaling group (so a silence, a drain or a mass
silence of one test never reaches another), its own agents (process agents, or a hollow fleet), and
starts from the harness's fast timings (beats every 0.5 s, timeout 3 s, grace 2 s, long cycle 0.5 s),
written again to etcd. Everything is seen as an outside client sees it: REST v2 (agents and their
history, sessions and their retries, the event stream), /metrics, etcd for the timings, the agents'
Redis stream for a replayed heartbeat, and signals sent to the agent processes the test started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
import redis.asyncio as aioredis

from sokovan.bus.streams import stream_key
from sokovan.common.events import AgentHeartbeat, encode_event
from sokovan.common.settings import Settings
from sokovan.harness import (
    SOKOVAN,
    Daemon,
    ManagerProc,
    bootstrap_admin,
    check_alive,
    stop_all,
    wait_agents,
)
from tests.fault.harness import (
    NODE_LIFECYCLE,
    TERMINAL,
    AgentProc,
    clear_timings,
    outcome,
    put_config,
    reset_cluster_state,
)

T = TypeVar("T")

TIMEOUT = 3.0  # the harness's NODE_LIFECYCLE: heartbeat_timeout
GRACE = 2.0  # ... and grace period, every class
assert NODE_LIFECYCLE["heartbeat_timeout"] == TIMEOUT
assert NODE_LIFECYCLE["grace_period"] == dict.fromkeys(("standard", "sensitive", "borrowed"), GRACE)
SECTION = "node_lifecycle"
SLOTS = "cpu=4,mem=4g"
RESOURCES = {"cpu": 1, "mem": "64m"}
# Within how long a verdict due now is seen: a few long cycles (0.5 s) and a poll or two.
PROMPTLY = 8.0
# From a silence's start to the agent's DEGRADED: the timeout, then a few cycles.
SILENCE_SEEN = TIMEOUT + PROMPTLY


def timings(*, timeout: float = TIMEOUT, grace: float = GRACE, interval: float = 0.5) -> dict[str, Any]:
    return {
        **NODE_LIFECYCLE,
        "heartbeat_interval": interval,
        "heartbeat_timeout": timeout,
        "grace_period": {"standard": grace, "sensitive": grace, "borrowed": grace},
    }


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
    """One manager for the module, on empty tables with the fast timings."""
    asyncio.run(reset_cluster_state(settings))
    manager = ManagerProc(service_env, tmp_path_factory.mktemp("node-lifecycle"))
    try:
        token = bootstrap_admin(service_env)
        manager.start()
        manager.wait_up()
        yield Cluster(manager, token, settings, service_env)
    finally:
        manager.stop()
        asyncio.run(clear_timings(settings))


async def until(
    probe: Callable[[], Awaitable[T]],
    ok: Callable[[T], bool],
    what: str,
    within: float,
    *,
    watch: Iterable[Daemon] = (),
    poll: float = 0.2,
) -> T:
    """`probe()` until `ok` holds for what it returns (that value); fails after `within` seconds, or
    at once when a watched daemon exited on its own."""
    began = time.monotonic()
    while True:
        value = await probe()
        if ok(value):
            return value
        check_alive(watch)
        if time.monotonic() - began > within:
            raise AssertionError(f"{what}: not within {within}s; last seen: {value}")
        await asyncio.sleep(poll)


def synchronous(read: Callable[[], T]) -> Callable[[], Awaitable[T]]:
    """A plain function as a probe for `until`."""

    async def probe() -> T:
        return read()

    return probe


@dataclass
class Node:
    """One test's part of the cluster: its scaling group and agents; REST v2 as the admin."""

    cluster: Cluster
    http: aiohttp.ClientSession
    group: str
    work: Path
    agents: list[AgentProc] = field(default_factory=list)
    killed: list[AgentProc] = field(default_factory=list)  # SIGKILLed: their kernels are orphans

    # REST v2

    async def call(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token or self.cluster.token}"}
        url = f"{self.cluster.manager.api}{path}"
        async with self.http.request(method, url, json=body, headers=headers) as resp:
            raw = await resp.text()
            return resp.status, (json.loads(raw) if raw else None)

    async def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        got, data = await self.call(method, path, body)
        assert got == status, f"{method} {path} {body}: {got} {data}"
        return data

    async def agent(self, agent_id: str) -> dict[str, Any]:
        data: dict[str, Any] = await self.ok("GET", f"/v2/agents/{agent_id}")
        return data

    async def agents_of_group(self) -> list[dict[str, Any]]:
        data = await self.ok("GET", f"/v2/agents?scaling_group={self.group}&limit=500")
        items: list[dict[str, Any]] = data["items"]
        return items

    async def history(self, agent_id: str) -> list[dict[str, Any]]:
        """The agent's status changes, oldest first."""
        data = await self.ok("GET", f"/v2/agents/{agent_id}/history?limit=500")
        return list(reversed(data["items"]))

    async def act(
        self, agent_id: str, action: str, body: dict[str, Any] | None = None, token: str | None = None
    ) -> tuple[int, Any]:
        return await self.call("POST", f"/v2/agents/{agent_id}/{action}", body, token)

    async def acted(self, agent_id: str, action: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """The action, which must be accepted: the agent as it answered."""
        status, data = await self.act(agent_id, action, body)
        assert status == 200, f"{action} {agent_id}: {status} {data}"
        return dict(data)

    async def create(self, **fields: Any) -> str:
        body = {"image": "shell", "resources": RESOURCES, "scaling_group": self.group, **fields}
        data = await self.ok("POST", "/v2/sessions", body, status=201)
        sid: str = data["id"]
        return sid

    async def interactive(self) -> str:
        return await self.create(type="interactive")

    async def session(self, sid: str) -> dict[str, Any]:
        data: dict[str, Any] = await self.ok("GET", f"/v2/sessions/{sid}")
        return data

    async def terminate(self, sid: str, forced: bool = False) -> None:
        await self.ok("DELETE", f"/v2/sessions/{sid}" + ("?forced=true" if forced else ""), status=202)

    async def cli(self, *args: str, ok: bool = True) -> tuple[int, str, str]:
        """`sokovan <args>` against the manager as the admin: (exit code, stdout, stderr)."""
        env = {**self.cluster.env, "SOKOVAN_API": self.cluster.manager.api}
        env["SOKOVAN_TOKEN"] = self.cluster.token
        proc = await asyncio.create_subprocess_exec(
            *SOKOVAN, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await proc.communicate()
        code = proc.returncode if proc.returncode is not None else -1
        if ok:
            assert code == 0, (args, code, out, err)
        return code, out.decode(), err.decode()

    async def metrics(self) -> str:
        async with self.http.get(f"{self.cluster.manager.api}/metrics") as resp:
            assert resp.status == 200
            return await resp.text()

    # waits

    async def wait_agent(self, agent_id: str, status: str, within: float = PROMPTLY) -> dict[str, Any]:
        return await until(
            lambda: self.agent(agent_id),
            lambda a: a["status"] == status,
            f"agent {agent_id} {status}",
            within,
            watch=self.watched(),
        )

    async def wait_session(
        self, sid: str, ok: Callable[[dict[str, Any]], bool], what: str, within: float = 20
    ) -> dict[str, Any]:
        return await until(lambda: self.session(sid), ok, f"session {sid} {what}", within)

    async def running_on(self, sid: str, agent_id: str) -> dict[str, Any]:
        """Wait until the session RUNNING (failing if it ends first) and check where its kernels are."""

        def running(s: dict[str, Any]) -> bool:
            assert s["status"] not in TERMINAL, f"{sid} ended {outcome(s)}: {s['status_info']}"
            return bool(s["status"] == "RUNNING")

        session = await self.wait_session(sid, running, "RUNNING")
        assert {k["agent_id"] for k in session["kernels"]} == {agent_id}, session["kernels"]
        return session

    async def ended(self, sid: str, within: float = 20) -> dict[str, Any]:
        return await self.wait_session(sid, lambda s: s["status"] in TERMINAL, "ended", within)

    # daemons

    def start_agent(
        self, name: str, slots: str = SLOTS, *, simulate: int | None = None, extra: Iterable[str] = ()
    ) -> AgentProc:
        agent = AgentProc(
            self.cluster.env,
            self.work,
            f"{self.group}-{name}",
            slots,
            simulate=simulate,
            extra=["--scaling-group", self.group, *extra],
        )
        self.agents.append(agent)
        return agent

    async def ready(self, *agents: AgentProc) -> None:
        """Until each agent (a process agent) is registered and READY."""
        ids = [a.agent_id for a in agents]
        await wait_agents(self.cluster.settings.db_url, len(ids), ids=ids, watch=agents)
        for agent_id in ids:
            await self.wait_agent(agent_id, "READY")

    def watched(self) -> list[Daemon]:
        return [self.cluster.manager, *self.agents]

    def signal(self, agent: AgentProc, sig: signal.Signals) -> None:
        """Signal the agent process this test started (its pid only)."""
        assert agent.proc is not None and agent.running, f"{agent.agent_id} is not running"
        os.kill(agent.proc.pid, sig)

    def sigkill(self, agent: AgentProc) -> None:
        agent.kill()
        self.killed.append(agent)

    # etcd

    async def timings_in_force(self) -> dict[str, Any]:
        data: dict[str, Any] = await self.ok("GET", "/v2/config/node-lifecycle")
        return data

    async def set_timings(self, value: dict[str, Any]) -> None:
        """Write the node_lifecycle section to etcd and wait until the manager has applied it."""
        await put_config(self.cluster.settings, SECTION, value)
        await until(
            self.timings_in_force,
            lambda now: now == value,
            "the timings applied",
            10,
            watch=[self.cluster.manager],
            poll=0.05,
        )

    async def set_invalid_timings(self, raw: bytes) -> None:
        """Write something invalid to etcd: the manager logs it as refused and keeps what it had."""
        before, logged = await self.timings_in_force(), self._refusals()
        await put_config(self.cluster.settings, SECTION, raw)
        await until(
            synchronous(self._refusals),
            lambda n: n > logged,
            "the invalid timings logged",
            10,
            watch=[self.cluster.manager],
            poll=0.05,
        )
        assert await self.timings_in_force() == before

    def _refusals(self) -> int:
        lines = self.cluster.manager.log_text().splitlines()
        return sum(1 for ln in lines if "cluster_config.invalid" in ln and f"manager/{SECTION}" in ln)

    # teardown

    async def clean_up(self) -> None:
        """Best effort, so the next test starts clean: the test's sessions ended, its agents stopped
        (SIGCONT first, then SIGINT: kernels destroyed), then disabled so that none of them stays
        a silent member of a scaling group; orphaned kernels of SIGKILLed agents killed."""
        for agent in self.agents:
            if agent.running and agent.proc is not None:
                os.kill(agent.proc.pid, signal.SIGCONT)
        with contextlib.suppress(Exception):
            await self._end_sessions()
        stop_all(self.agents, 30)  # SIGINT to each agent, SIGKILL if that did not end it
        with contextlib.suppress(Exception):
            for a in await self.agents_of_group():
                if a["status"] != "DOWN":
                    await self.act(a["id"], "disable", {"reason": "end of test"})
        for agent in self.killed:
            kill_orphans(self.work / agent.agent_id)

    async def _end_sessions(self) -> None:
        data = await self.ok("GET", "/v2/sessions?limit=500")
        mine = [s["id"] for s in data["items"] if s["scaling_group"] == self.group]
        live = [sid for sid in mine if (await self.session(sid))["status"] not in TERMINAL]
        for sid in live:
            await self.call("DELETE", f"/v2/sessions/{sid}?forced=true")
        deadline = time.monotonic() + 15
        while live and time.monotonic() < deadline:
            live = [sid for sid in live if (await self.session(sid))["status"] not in TERMINAL]
            await asyncio.sleep(0.2)


def kernel_pids(work_dir: Path) -> dict[str, tuple[int, int]]:
    """What the agent's state file (`<work dir>/agent-state.json`) says it runs: kernel id → (pid,
    the pid's start time); empty without a file."""
    try:
        state = json.loads((work_dir / "agent-state.json").read_text())
    except (OSError, ValueError):
        return {}
    return {k["kernel_id"]: (int(k["pid"]), int(k["pid_start"])) for k in state.get("kernels", [])}


def alive(pid: int, started: int) -> bool:
    """Whether `pid` is still the process that started at `started` (/proc/<pid>/stat field 22)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return False
    return len(fields) > 19 and fields[0] not in ("Z", "X") and fields[19] == str(started)


def kill_orphans(work_dir: Path) -> None:
    """Kernels an agent killed with SIGKILL left running: the ones its state file names, each only
    while its pid is still the process that started then."""
    for pid, started in kernel_pids(work_dir).values():
        if alive(pid, started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # the kernel leads a session of its own


@pytest.fixture
async def node(cluster: Cluster, tmp_path: Path) -> AsyncIterator[Node]:
    group = f"nl-{uuid.uuid4().hex[:8]}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        node = Node(cluster, http, group, tmp_path)
        await node.set_timings(timings())
        await node.ok("POST", "/v2/scaling-groups", {"name": group}, status=201)
        try:
            yield node
        finally:
            await node.clean_up()


def moves(history: list[dict[str, Any]]) -> list[tuple[str | None, str | None]]:
    return [(h["from"], h["to"]) for h in history if h["from"] != h["to"]]


def kernel_ids(session: dict[str, Any]) -> list[str]:
    return sorted(k["id"] for k in session["kernels"])


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels` (0 when there is none)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        metric_name, _, label_text = head.partition("{")
        if metric_name != name:
            continue
        if all(f'{k}="{v}"' in label_text for k, v in labels.items()):
            total += float(value)
    return total


# 1. SIGSTOP within the grace


async def test_sigstop_within_the_grace_keeps_the_kernels(node: Node) -> None:
    await node.set_timings(timings(grace=20))
    agent = node.start_agent("a")
    await node.ready(agent)
    sid = await node.interactive()
    before = await node.running_on(sid, agent.agent_id)
    boot = (await node.agent(agent.agent_id))["boot_id"]
    pids = kernel_pids(node.work / agent.agent_id)  # the agent's own record of its kernel process
    assert list(pids) == kernel_ids(before), pids

    node.signal(agent, signal.SIGSTOP)
    stopped_at = time.monotonic()
    degraded = await node.wait_agent(agent.agent_id, "DEGRADED", SILENCE_SEEN)
    silent_for = time.monotonic() - stopped_at
    # Strict boundary: the silence is longer than the timeout (the last beat came at most one
    # interval before the SIGSTOP).
    assert silent_for > TIMEOUT - 0.5 - 0.1, silent_for
    assert degraded["schedulable"] is False
    assert degraded["running_kernels"] == 1
    during = await node.session(sid)
    assert during["status"] == "RUNNING" and kernel_ids(during) == kernel_ids(before)
    assert [k["status"] for k in during["kernels"]] == ["RUNNING"]

    node.signal(agent, signal.SIGCONT)
    back = await node.wait_agent(agent.agent_id, "READY")
    assert back["boot_id"] == boot  # the same boot: never through BOOTING
    after = await node.session(sid)
    assert after["status"] == "RUNNING" and kernel_ids(after) == kernel_ids(before)
    assert [k["status"] for k in after["kernels"]] == ["RUNNING"]
    assert kernel_pids(node.work / agent.agent_id) == pids  # the same process, never restarted
    assert all(alive(pid, start) for pid, start in pids.values())
    assert moves(await node.history(agent.agent_id))[-3:] == [
        ("BOOTING", "READY"),
        ("READY", "DEGRADED"),
        ("DEGRADED", "READY"),
    ]

    # The kernel is still the agent's: a terminate reaches it and ends it normally.
    await node.terminate(sid)
    done = await node.ended(sid)
    assert outcome(done) == ("TERMINATED", None, "USER_CANCELLED"), done["status_info"]


# 2. SIGKILL: DOWN after the grace, retries elsewhere


async def test_sigkill_ends_kernels_after_the_grace_and_retries_run_elsewhere(node: Node) -> None:
    victim, other = node.start_agent("victim"), node.start_agent("other")
    await node.ready(victim, other)
    await node.acted(other.agent_id, "drain", {"reason": "place the batch on the victim"})
    retry = {"max_retries": 2, "retry_delay": 1}
    sids = [await node.create(type="batch", command="sleep 5", retry_policy=retry) for _ in range(2)]
    for sid in sids:
        await node.running_on(sid, victim.agent_id)
    assert (await node.acted(other.agent_id, "undrain"))["status"] == "READY"

    node.sigkill(victim)
    await node.wait_agent(victim.agent_id, "DEGRADED", SILENCE_SEEN)
    down = await node.wait_agent(victim.agent_id, "DOWN", GRACE + PROMPTLY)
    assert down["running_kernels"] == 0
    assert moves(await node.history(victim.agent_id))[-2:] == [("READY", "DEGRADED"), ("DEGRADED", "DOWN")]

    for sid in sids:
        first = await node.ended(sid)
        assert outcome(first) == ("ERROR", "FAILURE", "AGENT_TRANSIENT"), first["status_info"]
        chain = (await node.wait_session(sid, lambda s: len(s["retry_chain"]) > 1, "retried"))["retry_chain"]
        last = await node.ended(chain[-1], within=30)
        assert outcome(last) == ("TERMINATED", "SUCCESS", None), (last["status_info"], chain)
        assert {k["agent_id"] for k in last["kernels"]} == {other.agent_id}
        assert last["retry_cause"] == "AGENT_TRANSIENT"
        attempts = (await node.ok("GET", f"/v2/sessions/{sid}/attempts"))["items"]
        assert [(a["status"], a["cause"]) for a in attempts] == [
            ("ERROR", "AGENT_TRANSIENT"),
            ("TERMINATED", None),
        ], attempts


# 3. Drain


async def test_drain_places_elsewhere_or_waits_then_drained_and_undrained(node: Node) -> None:
    a, b = node.start_agent("a"), node.start_agent("b")
    await node.ready(a, b)
    await node.acted(b.agent_id, "drain")
    await node.wait_agent(b.agent_id, "DRAINED")  # nothing ran there
    first = [await node.interactive() for _ in range(2)]
    for sid in first:
        await node.running_on(sid, a.agent_id)
    assert (await node.acted(b.agent_id, "undrain"))["status"] == "READY"

    # The operator drains it with the CLI.
    _, out, _ = await node.cli("node", "drain", a.agent_id, "--reason", "kernel upgrade", "--yes", "--json")
    drained = json.loads(out)
    assert drained["status"] == "DRAINING" and drained["schedulable"] is False
    assert drained["status_info"]["reason"] == "kernel upgrade"
    _, out, _ = await node.cli("node", "list", "--status=DRAINING", f"--scaling-group={node.group}", "--json")
    assert [n["id"] for n in json.loads(out)["items"]] == [a.agent_id]
    # A new session goes to the other agent; the drained one's sessions run on.
    elsewhere = await node.interactive()
    await node.running_on(elsewhere, b.agent_id)
    for sid in first:
        assert (await node.session(sid))["status"] == "RUNNING"
    assert (await node.agent(a.agent_id))["status"] == "DRAINING"

    # With both agents draining, a new session waits, and says why.
    await node.acted(b.agent_id, "drain")
    waiting = await node.interactive()
    pending = await node.wait_session(
        waiting,
        lambda s: "DRAINING" in str((s["status_info"] or {}).get("pending_reason")),
        "pending for the drain",
    )
    assert pending["status"] == "PENDING", pending

    for sid in first:
        await node.terminate(sid)
    await node.wait_agent(a.agent_id, "DRAINED")
    assert (await node.session(waiting))["status"] == "PENDING"

    assert (await node.acted(a.agent_id, "undrain"))["status"] == "READY"
    await node.running_on(waiting, a.agent_id)  # placement resumes there
    _, out, _ = await node.cli("node", "status", a.agent_id, "--json")
    shown = json.loads(out)
    assert shown["status"] == "READY" and shown["running_kernels"] == 1
    assert [(h["from"], h["to"]) for h in shown["history"][:3]] == [
        ("DRAINED", "READY"),
        ("DRAINING", "DRAINED"),
        ("READY", "DRAINING"),
    ]
    assert shown["history"][2]["actor"] is not None and shown["history"][2]["reason"] == "kernel upgrade"


async def test_urgent_drain_ends_sessions_node_drained_and_they_are_retried_elsewhere(node: Node) -> None:
    a, b = node.start_agent("a"), node.start_agent("b")
    await node.ready(a, b)
    await node.acted(b.agent_id, "drain")
    retry = {"max_retries": 1, "retry_delay": 1}
    batch = [await node.create(type="batch", command="sleep 4", retry_policy=retry) for _ in range(2)]
    for sid in batch:
        await node.running_on(sid, a.agent_id)
    await node.acted(b.agent_id, "undrain")

    drained = await node.acted(a.agent_id, "drain", {"urgent": True, "reason": "disk failing"})
    assert drained["status"] == "DRAINING"
    for sid in batch:
        first = await node.ended(sid)
        assert outcome(first) == ("ERROR", "FAILURE", "NODE_DRAINED"), first["status_info"]
        chain = (await node.wait_session(sid, lambda s: len(s["retry_chain"]) > 1, "retried"))["retry_chain"]
        last = await node.ended(chain[-1], within=30)
        assert outcome(last) == ("TERMINATED", "SUCCESS", None), last["status_info"]
        assert {k["agent_id"] for k in last["kernels"]} == {b.agent_id}
        assert last["retry_cause"] == "NODE_DRAINED"
    await node.wait_agent(a.agent_id, "DRAINED")


# 4. Disable / enable, illegal actions, non-admins


async def test_disable_enable_and_every_refusal(node: Node) -> None:
    agent = node.start_agent("a")
    await node.ready(agent)
    aid = agent.agent_id
    sid = await node.interactive()
    running = await node.running_on(sid, aid)
    pids = kernel_pids(node.work / aid)
    assert list(pids) == kernel_ids(running), pids

    disabled = await node.acted(aid, "disable", {"reason": "bad memory"})
    assert disabled["status"] == "DOWN" and disabled["disabled"] is True
    ended = await node.ended(sid)
    assert outcome(ended) == ("ERROR", "FAILURE", "AGENT_TRANSIENT"), ended["status_info"]
    # It keeps beating (the beats are recorded) and stays DOWN: an operator's state.
    seq = disabled["heartbeat_seq"]
    still = await until(
        lambda: node.agent(aid), lambda a: a["heartbeat_seq"] >= seq + 4, "beats while disabled", 10
    )
    assert still["status"] == "DOWN"

    for action in ("drain", "undrain", "disable"):
        await assert_refused(node, aid, action, "DOWN")

    user = await node.ok(
        "POST", "/v2/keypairs", {"user": f"u-{node.group}", "project": "default", "role": "user"}, status=201
    )
    for action in ("drain", "undrain", "disable", "enable"):
        status, problem = await node.act(aid, action, token=user["token"])
        assert status == 403, (action, status, problem)
    assert (await node.agent(aid))["status"] == "DOWN"

    enabled = await node.acted(aid, "enable")
    assert enabled["status"] == "BOOTING" and enabled["disabled"] is False
    await node.wait_agent(aid, "READY")
    back = [("READY", "DOWN"), ("DOWN", "BOOTING"), ("BOOTING", "READY")]
    assert moves(await node.history(aid))[-3:] == back
    for action in ("undrain", "enable"):
        await assert_refused(node, aid, action, "READY")
    code, _, err = await node.cli("node", "enable", aid, ok=False)
    assert code != 0 and "READY" in err, (code, err)

    await node.acted(aid, "drain")
    await node.wait_agent(aid, "DRAINED")
    for action in ("drain", "enable"):
        await assert_refused(node, aid, action, "DRAINED")
    assert (await node.acted(aid, "undrain"))["status"] == "READY"

    # The kernel the manager ended while the agent was DOWN does not run on there.
    await until(
        synchronous(lambda: [p for p in pids.values() if alive(*p)]), lambda left: not left, "kernel gone", 15
    )
    status, missing = await node.act(f"{aid}-nope", "drain")
    assert status == 404, missing


async def assert_refused(node: Node, agent_id: str, action: str, state: str) -> None:
    status, problem = await node.act(agent_id, action, {"reason": "not now"})
    assert status == 409, (action, state, status, problem)
    assert problem["agent_status"] == state, problem
    assert state in problem["detail"], problem
    assert (await node.agent(agent_id))["status"] == state


# 5. Mass silence


class EventTap:
    """`GET /v2/events` as the admin, read in the background."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._resp: aiohttp.ClientResponse | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> EventTap:
        headers = {"Authorization": f"Bearer {self.node.cluster.token}"}
        self._resp = await self.node.http.get(
            f"{self.node.cluster.manager.api}/v2/events",
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        )
        assert self._resp.status == 200, await self._resp.text()
        self._task = asyncio.create_task(self._read(self._resp))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._resp is not None:
            self._resp.close()

    async def _read(self, resp: aiohttp.ClientResponse) -> None:
        name, data = None, []
        async for raw in resp.content:
            line = raw.decode().rstrip("\r\n")
            if line.startswith(":"):
                continue
            if line.startswith("event:"):
                name = line[len("event:") :].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:") :].strip())
            elif not line:
                if name is not None and data:
                    self.events.append((name, json.loads("\n".join(data))))
                name, data = None, []

    def named(self, name: str, **detail: Any) -> list[dict[str, Any]]:
        return [
            d
            for n, d in self.events
            if n == name and all(d.get("detail", {}).get(k) == v for k, v in detail.items())
        ]


async def test_mass_silence_holds_down_and_resumes(node: Node) -> None:
    fleet_size, silenced = 50, 30
    pause = node.work / "paused"
    fleet = node.start_agent("h", "cpu=4,mem=8g", simulate=fleet_size, extra=["--pause-file", str(pause)])
    ids = [f"{fleet.agent_id}-{i:04d}" for i in range(fleet_size)]
    await wait_agents(node.cluster.settings.db_url, fleet_size, ids=ids, watch=[fleet])

    def statuses(agents: list[dict[str, Any]]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for a in agents:
            counts[a["status"]] = counts.get(a["status"], 0) + 1
        return counts

    await until(node.agents_of_group, lambda ags: statuses(ags) == {"READY": fleet_size}, "fleet READY", 20)
    group = {"scaling_group": node.group}
    held_before = metric(await node.metrics(), "sokovan_agents_mass_silence_total", **group)

    async with EventTap(node) as tap:
        pause.write_text("".join(f"{agent_id}\n" for agent_id in ids[:silenced]))
        quiet = set(ids[:silenced])
        seen = await until(
            node.agents_of_group,
            lambda ags: {a["id"] for a in ags if a["status"] == "DEGRADED"} == quiet,
            f"{silenced} agents DEGRADED",
            SILENCE_SEEN + 1,  # + the fleet's look at its pause file
            watch=[fleet],
        )
        assert statuses(seen) == {"READY": fleet_size - silenced, "DEGRADED": silenced}
        # Past the timeout plus the grace and a few cycles, none is DOWN: the hold.
        deadline = time.monotonic() + GRACE + 3.0
        while time.monotonic() < deadline:
            now = statuses(await node.agents_of_group())
            assert "DOWN" not in now, now
            await asyncio.sleep(0.25)
        held = tap.named("agents.mass_silence", held=True, **group)
        assert len(held) == 1, tap.events[-20:]
        assert held[0]["detail"]["agents"] == fleet_size
        assert fleet_size / 2 < held[0]["detail"]["silent"] <= silenced, held
        text = await node.metrics()
        assert metric(text, "sokovan_agents_mass_silence_total", **group) == held_before + 1
        assert metric(text, "sokovan_agents_mass_silence_held", **group) == 1

        pause.write_text("")
        await until(
            node.agents_of_group,
            lambda ags: statuses(ags) == {"READY": fleet_size},
            "all READY again",
            PROMPTLY,
            watch=[fleet],
        )
        await until(
            synchronous(lambda: tap.named("agents.mass_silence", held=False, **group)),
            bool,
            "the end of the hold announced",
            PROMPTLY,
        )
        assert metric(await node.metrics(), "sokovan_agents_mass_silence_held", **group) == 0
    for agent_id in ids[:silenced]:
        assert moves(await node.history(agent_id))[-2:] == [("READY", "DEGRADED"), ("DEGRADED", "READY")]


# 6. A replayed heartbeat


async def test_a_replayed_heartbeat_is_refused_and_counted(node: Node) -> None:
    agent = node.start_agent("a")
    await node.ready(agent)
    aid = agent.agent_id
    now = await until(lambda: node.agent(aid), lambda a: a["heartbeat_seq"] >= 5, "a few beats", 10)
    replayed_before = metric(await node.metrics(), "sokovan_heartbeats_replayed_total")
    assert now["rejected_beats"] == 0

    settings = node.cluster.settings
    old = [1, now["heartbeat_seq"] - 1, now["heartbeat_seq"]]  # the last one: not above it either
    redis = aioredis.Redis.from_url(settings.redis_url)
    try:
        for seq in old:
            beat = AgentHeartbeat(
                agent_id=aid,
                seq=seq,
                boot_id=now["boot_id"],
                agent_class=now["agent_class"],
                scaling_group=now["scaling_group"],
                available_slots=now["available_slots"],
                images=now["images"],
                rpc_addr=now["rpc_addr"],
            )
            fields: Any = encode_event(beat, settings.cluster_secret or "")
            await redis.xadd(stream_key(settings.etcd_prefix), fields)
    finally:
        await redis.aclose()

    def refused(a: dict[str, Any]) -> bool:
        assert a["heartbeat_seq"] >= now["heartbeat_seq"], a  # never goes back
        assert a["boot_id"] == now["boot_id"] and a["status"] == "READY", a
        return bool(a["rejected_beats"] == len(old))

    after = await until(lambda: node.agent(aid), refused, "the replays counted", PROMPTLY)
    assert metric(await node.metrics(), "sokovan_heartbeats_replayed_total") >= replayed_before + len(old)
    # The agent's own beats still count.
    await until(
        lambda: node.agent(aid),
        lambda a: a["heartbeat_seq"] > after["heartbeat_seq"] + 2 and a["rejected_beats"] == len(old),
        "later beats accepted",
        10,
    )
    # The replays moved nothing: the agent's only moves are its first boot's.
    assert [to for _, to in moves(await node.history(aid))] == ["BOOTING", "READY"]


# 7. Timers changed in etcd apply live; an invalid value is ignored whole


async def test_timers_apply_live_and_an_invalid_value_is_ignored_whole(node: Node) -> None:
    agent = node.start_agent("a")
    await node.ready(agent)
    aid = agent.agent_id

    await node.set_timings(timings(timeout=60))
    node.signal(agent, signal.SIGSTOP)
    stopped_at = time.monotonic()
    while time.monotonic() - stopped_at < TIMEOUT + 2.0:  # well past the old timeout
        assert (await node.agent(aid))["status"] == "READY"
        await asyncio.sleep(0.25)

    # Back to a 3 s timeout, with a long grace: DEGRADED at the next judgement, not DOWN.
    await node.set_timings(timings(grace=30))
    await node.wait_agent(aid, "DEGRADED")

    # Invalid (the timeout does not outlast the interval; a 0.5 s grace in it): ignored whole,
    # so the 30 s grace still holds it DEGRADED. So is a value that is not JSON; and the API
    # refuses the invalid one outright.
    invalid = timings(timeout=0.5, interval=0.5, grace=0.5)
    await node.set_invalid_timings(json.dumps(invalid).encode())
    await node.set_invalid_timings(b"{not json")
    status, problem = await node.call("PUT", "/v2/config/node-lifecycle", invalid)
    assert 400 <= status < 500, (status, problem)
    assert await node.timings_in_force() == timings(grace=30)
    still = time.monotonic()
    while time.monotonic() - still < 2.0:
        assert (await node.agent(aid))["status"] == "DEGRADED"
        await asyncio.sleep(0.25)

    # A valid short grace applies at once: the agent has been silent longer than 3 + 2 s.
    await node.set_timings(timings())
    await node.wait_agent(aid, "DOWN")
    node.signal(agent, signal.SIGCONT)
    await node.wait_agent(aid, "READY")  # back after DOWN: through BOOTING
    assert moves(await node.history(aid))[-4:] == [
        ("READY", "DEGRADED"),
        ("DEGRADED", "DOWN"),
        ("DOWN", "BOOTING"),
        ("BOOTING", "READY"),
    ]
