"""The maintenance lane against real PostgreSQL: lost agents and leaked kernels."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.events import AgentHeartbeat
from sokovan.common.metrics import SLOT_DRIFT
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Agent, Kernel, Session
from sokovan.manager.repositories.agents import record_heartbeats
from sokovan.orchestrator.maintenance.leak_repair import LeakRepair
from sokovan.orchestrator.maintenance.lost_agents import LostAgentSweeper
from sokovan.orchestrator.orchestrator import session_handlers
from sokovan.orchestrator.provisioner.invariants import check_invariants
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from tests.orchestrator.db_seed import Seed


async def test_a_silent_agent_goes_down_and_its_sessions_end_with_agent_transient(
    engine: AsyncEngine,
) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("quiet")
    await seed.agent("alive")
    doomed = await seed.session(status=SessionStatus.RUNNING, agent_id="quiet")
    fine = await seed.session(status=SessionStatus.RUNNING, agent_id="alive")
    now = dt.datetime.now(dt.UTC)
    async with engine.begin() as conn:
        await conn.execute(
            update(Agent).where(Agent.id == "quiet").values(last_heartbeat_at=now - dt.timedelta(seconds=60))
        )
        await conn.execute(update(Agent).where(Agent.id == "alive").values(last_heartbeat_at=now))
    assert await LostAgentSweeper(engine).run(lost_timeout=30) == ["quiet"]
    coordinator = ScheduleCoordinator(engine, ClusterConfig(), session_handlers(engine, AgentRPCClient("x")))
    for _ in range(3):
        await coordinator.cycle()
    async with engine.connect() as conn:
        rows = {r.id: r for r in await conn.execute(select(Session.id, Session.status, Session.status_info))}
        agent_status = await conn.scalar(select(Agent.status).where(Agent.id == "quiet"))
    assert agent_status == "DOWN"
    assert rows[doomed].status == "ERROR" and rows[doomed].status_info["cause"] == "AGENT_TRANSIENT"
    assert rows[fine].status == "RUNNING"
    # A heartbeat from it again makes it READY.
    beat = AgentHeartbeat(
        agent_id="quiet",
        seq=99,
        boot_id="b2",
        available_slots={"cpu": "4"},
        images=["shell"],
        rpc_addr="127.0.0.1:1",
    )
    await record_heartbeats(engine, [beat])
    async with engine.connect() as conn:
        assert await conn.scalar(select(Agent.status).where(Agent.id == "quiet")) == "READY"


async def test_a_leaked_kernel_is_ended_and_counted_as_drift(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    leaked = await seed.session(
        status=SessionStatus.TERMINATED, kernel_status=KernelStatus.RUNNING, agent_id="a1"
    )
    async with engine.connect() as conn:
        assert await check_invariants(conn)  # the leak is visible
    before = SLOT_DRIFT._value.get()
    rpc = AgentRPCClient("x", timeout=0.5)
    assert await LeakRepair(engine, rpc).run() == 1
    assert SLOT_DRIFT._value.get() == before + 1
    async with engine.connect() as conn:
        assert await conn.scalar(select(Kernel.status).where(Kernel.session_id == leaked)) == "TERMINATED"
        assert await check_invariants(conn) == []
    # Nothing left: the next run finds no drift.
    assert await LeakRepair(engine, rpc).run() == 0
    await rpc.close()


async def test_the_reconciler_asks_about_stuck_kernels_and_running_ones_the_agent_no_longer_lists(
    engine: AsyncEngine,
) -> None:
    from sokovan.orchestrator.maintenance.reconciler import KernelReconciler

    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    old = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60)
    stuck = await seed.session(
        status=SessionStatus.CREATING, kernel_status=KernelStatus.CREATING, agent_id="a1"
    )
    listed = await seed.session(status=SessionStatus.RUNNING, agent_id="a1")
    vanished = await seed.session(status=SessionStatus.RUNNING, agent_id="a1")
    await seed.session(  # only just started creating: not a suspect
        status=SessionStatus.CREATING, kernel_status=KernelStatus.CREATING, agent_id="a1"
    )
    async with engine.begin() as conn:
        await conn.execute(
            update(Kernel)
            .where(Kernel.session_id.in_([stuck, listed, vanished]))
            .values(status_changed_at=old)
        )
        listed_kernel = await conn.scalar(select(Kernel.id).where(Kernel.session_id == listed))
        await conn.execute(
            update(Agent)
            .where(Agent.id == "a1")
            .values(last_heartbeat_at=dt.datetime.now(dt.UTC), running_kernels=[str(listed_kernel)])
        )
    rpc = AgentRPCClient("x", timeout=0.5)
    try:
        # The stuck CREATING one and the RUNNING one missing from the heartbeat; not the listed
        # one, not the `fresh` one that only just started creating.
        assert await KernelReconciler(engine, rpc).run(reconcile_after=10) == 2
    finally:
        await rpc.close()


async def test_no_agent_is_judged_silent_while_the_managers_lag_behind_the_events(
    engine: AsyncEngine,
) -> None:
    from sokovan.orchestrator.maintenance.lost_agents import BACKLOG_LIMIT

    seed = await Seed(engine).tenancy()
    await seed.agent("quiet")
    async with engine.begin() as conn:
        await conn.execute(
            update(Agent).values(last_heartbeat_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60))
        )
    sweeper = LostAgentSweeper(engine)
    assert await sweeper.run(lost_timeout=30, backlog=BACKLOG_LIMIT + 1) == []
    assert await sweeper.run(lost_timeout=30, backlog=0) == ["quiet"]
