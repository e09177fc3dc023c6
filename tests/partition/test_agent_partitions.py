"""An agent partitioned from the cluster, Jepsen style (CONTRACT section 13).

The victim agent runs in a network namespace of its own (`netns.Namespace`), reaching Redis and
etcd through forwarders on the host's end of its veth pair; the manager reaches its RPC across the
same pair. A partition drops every packet both ways (`tc netem loss 100%`): nothing is refused,
nothing is reset. The other agent is on the host. Timings are the fault harness's (beats every
0.5 s, timeout 3 s, grace 2 s) unless a test sets its own.

Checked in each scenario: no session has two live kernels, the allocation invariants hold
(`InvariantChecker`), every session ends as it should, and a history of what happened is printed.
`SOKOVAN_PARTITION_S` makes the partitions longer (`make bench`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fault.harness import AgentProc, InvariantChecker, outcome
from tests.fault.outage_proxy import OutageProxy, target_of
from tests.fault.test_node_lifecycle import (
    GRACE,
    PROMPTLY,
    SILENCE_SEEN,
    TIMEOUT,
    Node,
    alive,
    kernel_pids,
    moves,
    timings,
    until,
)
from tests.partition.netns import Namespace

EXTRA = float(os.environ.get("SOKOVAN_PARTITION_S", "0"))  # more seconds of partition (bench)
KILL_GRACE = 2.0  # the fault harness's --kill-grace
RETRY = {"max_retries": 2, "retry_delay": 1}


class NamespacedAgent(AgentProc):
    """A process agent started inside `ns` (`ip netns exec`)."""

    def __init__(self, ns: Namespace, *args: Any, **kwargs: Any) -> None:
        self.wrapper = ns.wrapper  # before the harness starts it
        super().__init__(*args, **kwargs)


class Partitioned:
    """The victim agent in its namespace, with the forwarders it reaches Redis and etcd by."""

    def __init__(self, node: Node, name: str, extra: list[str]) -> None:
        self.ns = Namespace.make(len(node.agents))
        settings = node.cluster.settings
        host = self.ns.host_address
        self.proxies = [
            OutageProxy(target_of(settings.redis_url), host).start(),
            OutageProxy(target_of(settings.etcd), host).start(),
        ]
        redis, etcd = self.proxies
        env = {
            **node.cluster.env,
            "SOKOVAN_REDIS_URL": settings.redis_url.replace(
                f"{redis.target[0]}:{redis.target[1]}", redis.address
            ),
            "SOKOVAN_ETCD": etcd.address,
        }
        own = ["--scaling-group", node.group, "--rpc-host", self.ns.address, *extra]
        self.agent = NamespacedAgent(
            self.ns, env, node.work, f"{node.group}-{name}", "cpu=4,mem=4g", extra=own
        )
        node.agents.append(self.agent)

    def close(self) -> None:
        self.ns.heal()
        for proxy in self.proxies:
            proxy.close()
        self.ns.close()


class History:
    """What happened, with the time since the first entry: printed at the end of each scenario."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.lines: list[str] = []

    def __call__(self, what: str) -> None:
        self.lines.append(f"{time.monotonic() - self.began:7.2f}s  {what}")

    def print(self, title: str) -> None:
        print(f"\n--- {title}")
        print("\n".join(self.lines))


@pytest.fixture
async def victim_of(node: Node) -> AsyncIterator[Any]:
    made: list[Partitioned] = []

    def make(name: str = "victim", *extra: str) -> Partitioned:
        made.append(Partitioned(node, name, list(extra)))
        return made[-1]

    try:
        yield make
    finally:
        for p in made:
            p.ns.heal()  # so that the node's clean-up reaches the agent
        await node.clean_up()
        for p in made:
            p.close()


async def _live_kernels_per_session(node: Node, sids: list[str]) -> dict[str, int]:
    """How many live kernels each session's retry chain holds, over every attempt."""
    counts: dict[str, int] = {}
    for sid in sids:
        chain = (await node.session(sid))["retry_chain"] or [sid]
        live = 0
        for attempt in chain:
            session = await node.session(attempt)
            live += sum(k["status"] not in ("TERMINATED", "CANCELLED", "ERROR") for k in session["kernels"])
        counts[sid] = live
    return counts


async def _invariants(node: Node) -> list[str]:
    checker = InvariantChecker(node.cluster.settings.db_url)
    try:
        return await checker.check()
    finally:
        await checker.close()


async def test_a_partition_past_the_grace_stops_the_old_kernels_and_the_retries_run_elsewhere(
    node: Node, victim_of: Any
) -> None:
    history = History()
    victim: Partitioned = victim_of()
    other = node.start_agent("other")
    await node.ready(victim.agent, other)
    await node.acted(other.agent_id, "drain", {"reason": "place the batch on the victim"})
    sids = [await node.create(type="batch", command="sleep 60", retry_policy=RETRY) for _ in range(2)]
    for sid in sids:
        await node.running_on(sid, victim.agent.agent_id)
    await node.acted(other.agent_id, "undrain")
    pids = kernel_pids(node.work / victim.agent.agent_id)
    assert len(pids) == 2 and all(alive(*p) for p in pids.values()), pids
    history(f"2 batch sessions RUNNING on the victim (kernel pids {sorted(p for p, _ in pids.values())})")

    victim.ns.cut()
    cut_at = time.monotonic()
    history("partition: every packet between the victim and the host dropped")
    await node.wait_agent(victim.agent.agent_id, "DEGRADED", SILENCE_SEEN)
    history("victim DEGRADED")
    await node.wait_agent(victim.agent.agent_id, "DOWN", GRACE + PROMPTLY)
    history("victim DOWN")
    # The agent stops its kernels itself once the timeout and the grace have passed on its side.
    await until(
        lambda: _async(lambda: [p for p, s in pids.values() if alive(p, s)]),
        lambda left: not left,
        "the victim's kernels stopped by its fence",
        TIMEOUT + GRACE + KILL_GRACE + PROMPTLY,
    )
    gone_after = time.monotonic() - cut_at
    history(
        f"the victim's kernels gone {gone_after:.1f}s after the cut (timeout + grace: {TIMEOUT + GRACE}s)"
    )
    assert victim.agent.proc is not None
    assert victim.ns.pids() == {victim.agent.proc.pid}  # `ps` in the namespace: the agent alone
    for sid in sids:
        retried = await node.wait_session(sid, lambda s: len(s["retry_chain"]) > 1, "retried", 30)
        assert outcome(retried) == ("ERROR", "FAILURE", "AGENT_TRANSIENT"), retried["status_info"]
        await node.running_on(retried["retry_chain"][-1], other.agent_id)
    history("both sessions retried and RUNNING on the other agent")
    await asyncio.sleep(EXTRA)

    victim.ns.heal()
    history("healed")
    back = await node.wait_agent(victim.agent.agent_id, "READY", 30)
    history(f"victim READY again (boot_id kept: {back['boot_id'][:8]})")
    await asyncio.sleep(2)  # a few beats and a maintenance cycle after the heal
    live = await _live_kernels_per_session(node, sids)
    assert live == dict.fromkeys(sids, 1), live
    assert await _invariants(node) == []
    went = moves(await node.history(victim.agent.agent_id))
    assert went[-4:] == [
        ("READY", "DEGRADED"),
        ("DEGRADED", "DOWN"),
        ("DOWN", "BOOTING"),
        ("BOOTING", "READY"),
    ]
    history(f"no session has two live kernels {live}; invariants hold")
    history.print("a partition past the grace")
    assert "agent.fenced" in victim.agent.log_text()


async def test_a_partition_within_the_grace_disturbs_nothing(node: Node, victim_of: Any) -> None:
    history = History()
    await node.set_timings(timings(grace=20))
    victim: Partitioned = victim_of()
    await node.ready(victim.agent)
    sid = await node.create(type="batch", command="sleep 60", retry_policy=RETRY)
    before = await node.running_on(sid, victim.agent.agent_id)
    pids = kernel_pids(node.work / victim.agent.agent_id)
    history("a batch session RUNNING on the victim")
    victim.ns.cut()
    history("partition")
    await node.wait_agent(victim.agent.agent_id, "DEGRADED", SILENCE_SEEN)
    history("victim DEGRADED")
    await asyncio.sleep(2 + EXTRA / 4)
    victim.ns.heal()
    history("healed")
    await node.wait_agent(victim.agent.agent_id, "READY", 30)
    history("victim READY")
    after = await node.session(sid)
    assert after["status"] == "RUNNING" and after["retry_chain"] in ([], [sid], None), after
    assert [k["id"] for k in after["kernels"]] == [k["id"] for k in before["kernels"]]
    assert kernel_pids(node.work / victim.agent.agent_id) == pids
    assert all(alive(*p) for p in pids.values())
    assert "agent.fenced" not in victim.agent.log_text()
    assert await _invariants(node) == []
    history("the same kernel, the same process; nothing retried; invariants hold")
    history.print("a partition within the grace")


async def test_a_flapping_link_disturbs_nothing(node: Node, victim_of: Any) -> None:
    history = History()
    await node.set_timings(timings(grace=20))
    victim: Partitioned = victim_of()
    await node.ready(victim.agent)
    sid = await node.create(type="interactive")
    await node.running_on(sid, victim.agent.agent_id)
    pids = kernel_pids(node.work / victim.agent.agent_id)
    history("an interactive session RUNNING on the victim")
    await victim.ns.flap(cycles=5 + int(EXTRA // 4), down=1.5, up=1.0)
    history("flapped: 1.5 s down, 1 s up, 5 times")
    await node.wait_agent(victim.agent.agent_id, "READY", 30)
    assert (await node.session(sid))["status"] == "RUNNING"
    assert all(alive(*p) for p in pids.values())
    assert await _invariants(node) == []
    history("victim READY, the session RUNNING on the same process; invariants hold")
    history.print("a flapping link")
    await node.terminate(sid)
    assert outcome(await node.ended(sid))[0] == "TERMINATED"


async def _async(read: Any) -> Any:
    return read()


async def test_a_sensitive_agent_keeps_its_kernels_until_it_is_heard_again(
    node: Node, victim_of: Any
) -> None:
    """Past the grace a `sensitive` agent keeps its kernels (an operator decides); the manager has
    retried the session elsewhere, and once the agent is heard again the old kernel is ended there."""
    history = History()
    victim: Partitioned = victim_of("sensitive", "--class", "sensitive")
    other = node.start_agent("other")
    await node.ready(victim.agent, other)
    await node.acted(other.agent_id, "drain", {"reason": "place the batch on the victim"})
    sid = await node.create(type="batch", command="sleep 60", retry_policy=RETRY)
    await node.running_on(sid, victim.agent.agent_id)
    await node.acted(other.agent_id, "undrain")
    pids = kernel_pids(node.work / victim.agent.agent_id)
    history("a batch session RUNNING on the sensitive victim")
    victim.ns.cut()
    history("partition")
    await node.wait_agent(victim.agent.agent_id, "DOWN", SILENCE_SEEN + GRACE + PROMPTLY)
    history("victim DOWN")
    retried = await node.wait_session(sid, lambda s: len(s["retry_chain"]) > 1, "retried", 30)
    await node.running_on(retried["retry_chain"][-1], other.agent_id)
    history("retried and RUNNING on the other agent")
    await asyncio.sleep(1 + EXTRA / 4)
    assert all(alive(*p) for p in pids.values()), "a sensitive agent stopped its kernels by itself"
    assert "agent.partitioned_keeping_kernels" in victim.agent.log_text()
    history("the old kernel still runs on the far side (sensitive: kept for an operator)")
    victim.ns.heal()
    healed = time.monotonic()
    history("healed")
    await until(
        lambda: _async(lambda: [p for p, s in pids.values() if alive(p, s)]),
        lambda left: not left,
        "the kernel the manager ended, ended by the agent once it is heard again",
        PROMPTLY + KILL_GRACE,
    )
    history(f"the old kernel ended {time.monotonic() - healed:.1f}s after the heal")
    await node.wait_agent(victim.agent.agent_id, "READY", 30)
    assert await _live_kernels_per_session(node, [sid]) == {sid: 1}
    assert await _invariants(node) == []
    history("one live kernel for the session; invariants hold")
    history.print("a sensitive agent partitioned past the grace")


async def test_the_manager_cut_from_the_agents_rpc_both_ways(node: Node, victim_of: Any) -> None:
    """The manager cannot reach the agent's RPC (nor the agent answer it), while the agent's reports
    still reach Redis: nothing is DOWN, and what the manager asked meanwhile (a terminate, a start)
    is carried out once the link is back; no session is stuck."""
    history = History()
    victim: Partitioned = victim_of()
    await node.ready(victim.agent)
    running = await node.interactive()
    await node.running_on(running, victim.agent.agent_id)
    port = int((await node.agent(victim.agent.agent_id))["rpc_addr"].rpartition(":")[2])
    history(f"an interactive session RUNNING on the victim (RPC port {port})")
    victim.ns.cut(port)
    history("the RPC cut both ways (Redis and etcd still reachable)")
    await node.terminate(running)
    batch = await node.create(type="batch", command="sleep 1", retry_policy=RETRY)
    history("asked meanwhile: terminate the interactive one, create a batch one")
    await asyncio.sleep(8 + EXTRA / 4)
    assert (await node.agent(victim.agent.agent_id))["status"] == "READY"
    history("the victim still READY (its heartbeats go by Redis)")
    victim.ns.heal()
    history("healed")
    ended = await node.ended(running, within=60)
    assert outcome(ended)[0] == "TERMINATED", ended["status_info"]
    history(f"the interactive session ended {outcome(ended)}")
    # It ran once the link was back, on its first attempt or (the start timed out) a retry.
    final = await node.ended(batch, within=90)
    chain = final["retry_chain"] or [batch]
    if len(chain) > 1:
        final = await node.ended(chain[-1], within=90)
    assert outcome(final) == ("TERMINATED", "SUCCESS", None), final["status_info"]
    history(f"the batch session ended {outcome(final)} after {len(chain)} attempt(s)")
    assert ("READY", "DEGRADED") not in moves(await node.history(victim.agent.agent_id))
    assert await _invariants(node) == []
    history("the victim never DEGRADED; invariants hold")
    history.print("the manager cut from the agent's RPC")
