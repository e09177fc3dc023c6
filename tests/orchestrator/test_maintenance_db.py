"""The maintenance lane against real PostgreSQL: leaked kernels and reconciliation."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.metrics import SLOT_DRIFT
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Agent, Kernel
from sokovan.orchestrator.maintenance.leak_repair import LeakRepair
from sokovan.orchestrator.provisioner.invariants import check_invariants
from tests.orchestrator.db_seed import Seed


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
