"""What an idle manager reads every cycle takes no transaction: the maintenance lane's looks and the
node lane's gauges run each statement as a transaction of its own, without a BEGIN and a ROLLBACK
round trip around it (an idle manager of 1,000 agents made 14 such round trips a second, a third of
its statements). A repair found by a look still writes in a transaction. (The API's GETs read the
same way, through `ManagerContext.reads`; tests/api covers what they answer.)"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.rpc import AgentRPCClient
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.orchestrator.maintenance.census import Census
from sokovan.orchestrator.maintenance.leak_repair import LeakRepair
from sokovan.orchestrator.maintenance.reconciler import KernelReconciler
from sokovan.orchestrator.maintenance.statistics import FreshStatistics
from sokovan.orchestrator.node.handlers.count_agents import CountAgents
from sokovan.orchestrator.node.handlers.publish_devices import PublishDevices
from tests.orchestrator.db_seed import Seed


@contextlib.contextmanager
def isolation_of_each_statement(engine: AsyncEngine) -> Iterator[list[tuple[str, str]]]:
    """(isolation level, statement's first word) of every statement run on `engine` meanwhile."""
    seen: list[tuple[str, str]] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        level = conn.get_execution_options().get("isolation_level", "transaction")
        seen.append((level, statement.split(None, 1)[0].upper()))

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


async def a_kernel_running_in(engine: AsyncEngine, session: SessionStatus) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    await seed.session(status=session, kernel_status=KernelStatus.RUNNING, agent_id="a1")


@contextlib.asynccontextmanager
async def agents_rpc() -> AsyncIterator[AgentRPCClient]:
    rpc = AgentRPCClient("x", timeout=0.5)
    try:
        yield rpc
    finally:
        await rpc.close()


async def test_the_idle_looks_take_no_transaction(engine: AsyncEngine) -> None:
    await a_kernel_running_in(engine, SessionStatus.RUNNING)
    async with agents_rpc() as rpc:
        with isolation_of_each_statement(engine) as seen:
            await Census(engine).run()
            assert await FreshStatistics(engine, tables=["agents"]).run() in ([], ["agents"])
            await KernelReconciler(engine, rpc).run(reconcile_after=3600)
            assert await LeakRepair(engine, rpc).run() == 0
            await CountAgents(engine).execute([])
            await PublishDevices(engine).execute([])
    looks = [level for level, word in seen if word == "SELECT"]
    assert len(looks) >= 7
    assert set(looks) == {"AUTOCOMMIT"}


async def test_a_leak_found_by_a_look_is_repaired_in_a_transaction(engine: AsyncEngine) -> None:
    await a_kernel_running_in(engine, SessionStatus.TERMINATED)  # a leak
    async with agents_rpc() as rpc:
        with isolation_of_each_statement(engine) as seen:
            assert await LeakRepair(engine, rpc).run() == 1
    writes = [level for level, word in seen if word != "SELECT"]  # the moves: a WITH … UPDATE
    assert writes
    assert set(writes) == {"transaction"}
