"""The node lifecycle lane and the heartbeats' moves against real PostgreSQL (seed 002)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Sequence

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.user_events import UserEvent
from sokovan.common.events import AgentHealth, AgentHeartbeat
from sokovan.common.metrics import HEARTBEATS_REPLAYED
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.types import AgentStatus, KernelStatus, SessionStatus
from sokovan.config.cluster import NODE_LIFECYCLE, ClusterConfig
from sokovan.db.models import Agent, AgentHistory, Kernel, Session
from sokovan.manager.repositories.agents import record_heartbeats
from sokovan.orchestrator.node.backlog import BACKLOG_LIMIT, Backlog
from sokovan.orchestrator.node.coordinator import NodeCoordinator
from sokovan.orchestrator.node.watch import Watch
from sokovan.orchestrator.orchestrator import node_lanes, session_handlers
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from tests.orchestrator.db_seed import Seed
from tests.support import statements_sent

A = AgentStatus
TIMINGS = {
    "heartbeat_interval": 1,
    "heartbeat_timeout": 10,
    "grace_period": {"standard": 20, "sensitive": 100},
}


class Collect:
    """A UserEventPublisher that keeps what it is given."""

    def __init__(self) -> None:
        self.events: list[UserEvent] = []

    async def publish_many(self, events: Sequence[UserEvent]) -> None:
        self.events.extend(events)


def config(**overrides: object) -> ClusterConfig:
    cfg = ClusterConfig()
    assert cfg.apply(NODE_LIFECYCLE, json.dumps({**TIMINGS, **overrides}).encode())
    return cfg


def nodes(
    engine: AsyncEngine,
    cfg: ClusterConfig,
    events: Collect | None = None,
    backlog: int = 0,
    watch: Watch | None = None,
) -> NodeCoordinator:
    async def unread() -> int:
        return backlog

    lanes = node_lanes(engine, cfg, events, Backlog(unread), watch)  # type: ignore[arg-type]
    return NodeCoordinator(engine, lanes, events=events)  # type: ignore[arg-type]


async def silent_for(engine: AsyncEngine, seconds: float, *agents: str) -> None:
    at = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
    async with engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id.in_(agents)).values(last_heartbeat_at=at))


async def statuses(engine: AsyncEngine) -> dict[str, str]:
    async with engine.connect() as conn:
        return {r.id: r.status for r in await conn.execute(select(Agent.id, Agent.status))}


def beat(
    agent_id: str, seq: int, boot: str = "b", ok: bool = True, agent_class: str = "standard"
) -> AgentHeartbeat:
    return AgentHeartbeat(
        agent_id=agent_id,
        seq=seq,
        boot_id=boot,
        agent_class=agent_class,
        health=AgentHealth(ok=ok, problems=[] if ok else ["work dir almost full"]),
        available_slots={"cpu": "4", "mem": str(8 * 2**30)},
        images=["python:3", "shell"],
        rpc_addr="127.0.0.1:1",
    )


async def test_silence_degrades_then_a_beat_within_the_grace_restores_ready_untouched(
    engine: AsyncEngine,
) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("quiet")
    await seed.agent("alive")
    sid = await seed.session(
        status=SessionStatus.RUNNING, kernel_status=KernelStatus.RUNNING, agent_id="quiet"
    )
    await silent_for(engine, 0, "alive")
    await silent_for(engine, 15, "quiet")
    events = Collect()
    await nodes(engine, config(), events).cycle()
    assert (await statuses(engine)) == {"quiet": "DEGRADED", "alive": "READY"}
    assert any(e.name == "agent.status" and e.to_status == "DEGRADED" for e in events.events)
    # A heartbeat within the grace: READY, the kernel never touched.
    recorded = await record_heartbeats(engine, [beat("quiet", 1, boot="b")])
    assert recorded.ready == ["quiet"]
    assert (await statuses(engine))["quiet"] == "READY"
    async with engine.connect() as conn:
        assert await conn.scalar(select(Kernel.status).where(Kernel.session_id == sid)) == "RUNNING"
        moves = [
            (r.from_status, r.to_status, r.handler)
            for r in await conn.execute(
                select(AgentHistory).where(AgentHistory.agent_id == "quiet").order_by(AgentHistory.id)
            )
        ]
    assert moves == [("READY", "DEGRADED", "DetectSilence"), ("DEGRADED", "READY", "heartbeat")]


async def test_down_after_the_grace_ends_kernels_agent_transient(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("quiet", status=A.DEGRADED)
    await seed.agent("a2")
    await seed.agent("a3")
    await silent_for(engine, 0, "a2", "a3")
    doomed = await seed.session(
        status=SessionStatus.RUNNING, kernel_status=KernelStatus.RUNNING, agent_id="quiet"
    )
    cfg = config()
    await silent_for(engine, 25, "quiet")  # past the timeout, within timeout + grace (30)
    await nodes(engine, cfg).cycle()
    assert (await statuses(engine))["quiet"] == "DEGRADED"
    await silent_for(engine, 31, "quiet")
    await nodes(engine, cfg).cycle()
    assert (await statuses(engine))["quiet"] == "DOWN"
    coordinator = ScheduleCoordinator(engine, ClusterConfig(), session_handlers(engine, AgentRPCClient("x")))
    for _ in range(3):
        await coordinator.cycle()
    async with engine.connect() as conn:
        row = (
            await conn.execute(select(Session.status, Session.status_info).where(Session.id == doomed))
        ).one()
    assert row.status == "ERROR" and row.status_info["cause"] == "AGENT_TRANSIENT"


async def test_each_class_has_its_grace(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    for agent_id in ("std", "sens", "ok1", "ok2", "ok3"):
        await seed.agent(agent_id)
    await silent_for(engine, 0, "ok1", "ok2", "ok3")
    async with engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "sens").values(agent_class="sensitive"))
        await conn.execute(update(Agent).where(Agent.id.in_(["std", "sens"])).values(status="DEGRADED"))
    await silent_for(engine, 40, "std", "sens")
    await nodes(engine, config()).cycle()
    got = await statuses(engine)
    assert (got["std"], got["sens"]) == ("DOWN", "DEGRADED")


async def test_mass_silence_holds_down_until_reports_resume(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    for i in range(5):
        await seed.agent(f"a{i}", status=A.DEGRADED if i < 3 else A.READY)
    await silent_for(engine, 0, "a3", "a4")
    await silent_for(engine, 40, "a0", "a1", "a2")  # 3 of 5, within one timeout of each other
    events = Collect()
    cfg = config()
    coordinator = nodes(engine, cfg, events)
    await coordinator.cycle()
    got = await statuses(engine)
    assert [got[f"a{i}"] for i in range(3)] == ["DEGRADED"] * 3
    held = [e for e in events.events if e.name == "agents.mass_silence"]
    assert held and held[0].detail["held"] is True and held[0].detail["silent"] == 3
    # Reports resume for two of them: 1 of 5 is silent and the hold ends. Its end counts as every
    # agent's last word, so the one still silent is not DOWN at once (its report may be on its way)...
    await record_heartbeats(engine, [beat("a0", 1), beat("a1", 1)])
    await coordinator.cycle()
    got = await statuses(engine)
    assert (got["a0"], got["a1"], got["a2"]) == ("READY", "READY", "DEGRADED")
    assert [e.detail["held"] for e in events.events if e.name == "agents.mass_silence"] == [True, False]
    # ... but once a fresh timeout and grace have passed since the hold ended (short ones here).
    short = {"heartbeat_interval": 0.1, "heartbeat_timeout": 0.5, "grace_period": {"standard": 0.5}}
    assert cfg.apply(NODE_LIFECYCLE, json.dumps(short).encode())
    await asyncio.sleep(1.2)
    await silent_for(engine, 0, "a0", "a1", "a3", "a4")
    await coordinator.cycle()
    assert (await statuses(engine))["a2"] == "DOWN"


async def test_no_agent_is_judged_silent_while_the_managers_lag(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("quiet")
    await silent_for(engine, 15, "quiet")
    await nodes(engine, config(), backlog=BACKLOG_LIMIT + 1).cycle()
    assert (await statuses(engine))["quiet"] == "READY"
    await nodes(engine, config()).cycle()
    assert (await statuses(engine))["quiet"] == "DEGRADED"


ALIVE = {f"alive{i}": "READY" for i in range(3)}


async def test_no_silence_is_judged_while_reports_do_not_reach_the_manager_nor_from_before(
    engine: AsyncEngine,
) -> None:
    """The database (or Redis) was away: the agents' beats of that time never reached the table.
    Nobody is judged while the consumer's reads fail, and once they resume every agent's silence
    counts from then: the agents whose first beat is still on its way are not DOWN for our outage."""
    seed = await Seed(engine).tenancy()
    await seed.agent("ready")
    await seed.agent("degraded", status=A.DEGRADED)
    await seed.agent("draining", status=A.DRAINING)
    await seed.session(status=SessionStatus.RUNNING, kernel_status=KernelStatus.RUNNING, agent_id="draining")
    for i in range(3):  # so that the three silent ones are no mass silence
        await seed.agent(f"alive{i}")
    await silent_for(engine, 0, "alive0", "alive1", "alive2")
    await silent_for(engine, 40, "ready", "degraded", "draining")  # past timeout plus grace (30)
    watch = Watch(stale=60)
    watch.report(True, dt.datetime.now(dt.UTC) - dt.timedelta(seconds=50))
    watch.report(False)  # the reads broke off
    coordinator = nodes(engine, config(), watch=watch)
    before = {**ALIVE, "ready": "READY", "degraded": "DEGRADED", "draining": "DRAINING"}
    await coordinator.cycle()
    assert (await statuses(engine)) == before
    watch.report(True)  # they resumed just now
    await coordinator.cycle()
    assert (await statuses(engine)) == before
    # Reads that resumed long enough ago: the silence since then counts as before.
    watch = Watch(stale=60)
    watch.report(True, dt.datetime.now(dt.UTC) - dt.timedelta(seconds=45))
    watch.report(True)
    await nodes(engine, config(), watch=watch).cycle()
    after = {**ALIVE, "ready": "DOWN", "degraded": "DOWN", "draining": "DRAINED"}  # one cycle: both steps
    assert (await statuses(engine)) == after


async def test_timers_change_live_and_an_invalid_value_is_ignored_whole(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("quiet")
    await silent_for(engine, 15, "quiet")
    cfg = config(heartbeat_timeout=60)
    coordinator = nodes(engine, cfg)
    await coordinator.cycle()
    assert (await statuses(engine))["quiet"] == "READY"
    # Invalid (timeout not longer than the interval): ignored whole, 60 s stays in force.
    assert not cfg.apply(
        NODE_LIFECYCLE, json.dumps({"heartbeat_interval": 5, "heartbeat_timeout": 5}).encode()
    )
    await coordinator.cycle()
    assert (await statuses(engine))["quiet"] == "READY"
    assert cfg.apply(NODE_LIFECYCLE, json.dumps({"heartbeat_interval": 1, "heartbeat_timeout": 10}).encode())
    await coordinator.cycle()
    assert (await statuses(engine))["quiet"] == "DEGRADED"


async def test_booting_agents_fail_on_timeout_or_three_unhealthy_reports(engine: AsyncEngine) -> None:
    await Seed(engine).tenancy()
    await record_heartbeats(engine, [beat("sick", 1, ok=False)])
    await record_heartbeats(engine, [beat("slow", 1, ok=False)])
    assert (await statuses(engine)) == {"sick": "BOOTING", "slow": "BOOTING"}
    await record_heartbeats(engine, [beat("sick", 2, ok=False)])
    await record_heartbeats(engine, [beat("sick", 3, ok=False)])
    assert (await statuses(engine))["sick"] == "FAILED"
    async with engine.begin() as conn:
        await conn.execute(
            update(Agent)
            .where(Agent.id == "slow")
            .values(status_changed_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=700))
        )
    await nodes(engine, ClusterConfig()).cycle()
    assert (await statuses(engine))["slow"] == "FAILED"
    # FAILED stays FAILED whatever it reports (an operator enables it).
    await record_heartbeats(engine, [beat("slow", 2)])
    assert (await statuses(engine))["slow"] == "FAILED"


async def test_a_healthy_first_beat_boots_to_ready_and_an_unhealthy_beat_degrades(
    engine: AsyncEngine,
) -> None:
    await Seed(engine).tenancy()
    recorded = await record_heartbeats(engine, [beat("n1", 1)])
    assert recorded.ready == ["n1"]
    assert [(e.from_status, e.to_status) for e in recorded.events] == [
        (None, "BOOTING"),
        ("BOOTING", "READY"),
    ]
    await record_heartbeats(engine, [beat("n1", 2, ok=False)])
    assert (await statuses(engine))["n1"] == "DEGRADED"
    await record_heartbeats(engine, [beat("n1", 3)])
    assert (await statuses(engine))["n1"] == "READY"
    # A new boot goes through BOOTING again.
    recorded = await record_heartbeats(engine, [beat("n1", 1, boot="second")])
    assert [(e.from_status, e.to_status) for e in recorded.events] == [
        ("READY", "BOOTING"),
        ("BOOTING", "READY"),
    ]


async def test_a_replayed_heartbeat_is_refused_and_counted(engine: AsyncEngine) -> None:
    await Seed(engine).tenancy()
    await record_heartbeats(engine, [beat("n1", 5)])
    before = HEARTBEATS_REPLAYED._value.get()
    recorded = await record_heartbeats(engine, [beat("n1", 3), beat("n1", 6), beat("n1", 4)])
    assert recorded.replayed == 2
    recorded = await record_heartbeats(engine, [beat("n1", 6)])
    assert recorded.replayed == 1
    assert HEARTBEATS_REPLAYED._value.get() == before + 3
    async with engine.connect() as conn:
        row = (
            await conn.execute(select(Agent.heartbeat_seq, Agent.rejected_beats).where(Agent.id == "n1"))
        ).one()
    assert (row.heartbeat_seq, row.rejected_beats) == (6, 3)


async def test_down_agents_come_back_through_booting_unless_disabled(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("lost", status=A.DOWN)
    await seed.agent("off", status=A.DOWN)
    async with engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "off").values(disabled=True))
    recorded = await record_heartbeats(engine, [beat("lost", 1), beat("off", 1)])
    assert recorded.ready == ["lost"]
    assert (await statuses(engine)) == {"lost": "READY", "off": "DOWN"}


async def test_draining_becomes_drained_when_its_kernels_end(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("d1", status=A.DRAINING)
    await seed.agent("d2", status=A.DRAINING)
    await silent_for(engine, 0, "d1", "d2")
    await seed.session(status=SessionStatus.RUNNING, kernel_status=KernelStatus.RUNNING, agent_id="d1")
    await nodes(engine, config()).cycle()
    assert (await statuses(engine)) == {"d1": "DRAINING", "d2": "DRAINED"}
    # Heartbeats never undo a drain.
    await record_heartbeats(engine, [beat("d2", 1, boot="new")])
    assert (await statuses(engine))["d2"] == "DRAINED"


async def test_a_silent_draining_agent_loses_its_kernels_unless_in_a_mass_silence(
    engine: AsyncEngine,
) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("d1", status=A.DRAINING)
    for i in range(4):
        await seed.agent(f"ok{i}")
    await silent_for(engine, 0, "ok0", "ok1", "ok2", "ok3")
    sid = await seed.session(status=SessionStatus.RUNNING, kernel_status=KernelStatus.RUNNING, agent_id="d1")
    await silent_for(engine, 40, "d1")  # past timeout + grace, alone: its kernels end, it is DRAINED
    await nodes(engine, config()).cycle()
    assert (await statuses(engine))["d1"] == "DRAINED"
    async with engine.connect() as conn:
        assert await conn.scalar(select(Kernel.status).where(Kernel.session_id == sid)) == "ERROR"
    # The same in a mass silence (3 of 5 silent together): held, the kernel stays.
    async with engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "d1").values(status="DRAINING"))
    sid = await seed.session(status=SessionStatus.RUNNING, kernel_status=KernelStatus.RUNNING, agent_id="d1")
    await silent_for(engine, 40, "d1", "ok0", "ok1")
    await nodes(engine, config()).cycle()
    assert (await statuses(engine))["d1"] == "DRAINING"
    async with engine.connect() as conn:
        assert await conn.scalar(select(Kernel.status).where(Kernel.session_id == sid)) == "RUNNING"


async def test_a_batch_of_beats_refreshes_every_column_and_a_move_also_its_status_time(
    engine: AsyncEngine,
) -> None:
    """One statement refreshes every agent of a batch: each beat's columns are written; only a beat
    that moves its agent writes the status time and reason."""
    await Seed(engine).tenancy()
    await record_heartbeats(engine, [beat("n1", 1), beat("n2", 1)])
    async with engine.connect() as conn:
        before = {r.id: r for r in await conn.execute(select(Agent))}
    grown = beat("n1", 2).model_copy(
        update={"available_slots": {"cpu": "8", "mem": "1"}, "images": ["z", "a"], "running_kernels": ["k1"]}
    )
    with statements_sent(engine) as sent:
        await record_heartbeats(engine, [grown, beat("n2", 2, ok=False)])
    assert len(sent) == 4  # the groups, the agents locked, every refresh in one, the move's history
    async with engine.connect() as conn:
        after = {r.id: r for r in await conn.execute(select(Agent))}
    n1, n2 = after["n1"], after["n2"]
    assert (n1.status, n1.heartbeat_seq, n1.available_slots) == ("READY", 2, {"cpu": "8", "mem": "1"})
    assert (n1.images, n1.running_kernels) == (["a", "z"], ["k1"])
    assert n1.status_changed_at == before["n1"].status_changed_at  # refreshed, not moved
    assert n1.last_heartbeat_at > before["n1"].last_heartbeat_at
    assert n1.statics_fingerprint != before["n1"].statics_fingerprint
    assert (n2.status, n2.heartbeat_seq, n2.health["ok"]) == ("DEGRADED", 2, False)
    assert n2.status_changed_at > before["n2"].status_changed_at
    assert n2.status_info["handler"] and n2.status_info["reason"]
