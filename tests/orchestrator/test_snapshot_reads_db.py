"""A placement cycle's picture of the cluster is read in a fixed handful of statements: the owners'
policies with their active sessions, the projects' and domains' quotas together, every agent's
occupancy (slots and kernel count) in one, and, for a fleet unchanged since the last cycle, one
statement for the agents. Given an engine for them, the statements that do not depend on each
other run at once, each on a connection of its own, and read the same picture."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import event, insert, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import SessionStatus
from sokovan.db.engine import autocommit
from sokovan.db.models import Domain, Keypair, KeypairResourcePolicy, Project
from sokovan.orchestrator.provisioner.build import provisioner_for
from sokovan.orchestrator.provisioner.loader import load_snapshots
from sokovan.orchestrator.provisioner.reasons import at_concurrency_limit
from sokovan.state.session_reads import fetch_sessions
from tests.orchestrator.db_seed import Seed
from tests.support import statements_sent


@pytest.mark.parametrize("at_once", [False, True])
async def test_a_cycles_snapshot_is_seven_statements_and_holds_what_the_tables_say(
    engine: AsyncEngine, at_once: bool
) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=8)
    await seed.agent("a2", cpu=8)
    await seed.session(cpu=2, status=SessionStatus.RUNNING, agent_id="a1")
    await seed.session(cpu=1, size=2, status=SessionStatus.RUNNING, agent_id="a1")
    await seed.session(cpu=3, status=SessionStatus.TERMINATED, agent_id="a2")  # holds nothing
    await seed.session(cpu=1)
    async with engine.begin() as conn:
        await conn.execute(update(Project).values(total_resource_slots={"cpu": "10"}))
        await conn.execute(update(Domain).values(total_resource_slots={"cpu": "20"}))
        # a cap on concurrent sessions: the owner's active sessions are counted for it
        await conn.execute(insert(KeypairResourcePolicy).values(name="capped", max_concurrent_sessions=5))
        await conn.execute(
            update(Keypair).where(Keypair.access_key == "AK1").values(resource_policy="capped")
        )
    reads = autocommit(engine) if at_once else None
    connections: set[int] = set()

    def seen(conn: Any, *_: Any) -> None:
        connections.add(id(conn.connection.dbapi_connection))

    async with engine.connect() as conn:
        pending = await fetch_sessions(conn, frozenset({SessionStatus.PENDING}))
        await load_snapshots(conn, pending, reads=reads)  # the fleet's capacity is parsed once
        event.listen(engine.sync_engine, "before_cursor_execute", seen)
        try:
            with statements_sent(engine) as sent:
                snapshot = (await load_snapshots(conn, pending, reads=reads))["default"]
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", seen)
    # keypairs, quotas, usage (there are quotas), occupancy, agents, the group, nominations
    assert len(sent) == 7, sent
    # At once: the six first reads (nominations among them) on six connections, then usage, the
    # one read that waits for them, on the cycle's own.
    assert len(connections) == (7 if at_once else 1)
    agents = {a.id: a for a in snapshot.agents}
    assert agents["a1"].occupied == {"cpu": Decimal(4), "mem": Decimal(3 * 2**30)}
    assert agents["a1"].kernel_count == 3
    assert agents["a1"].free["cpu"] == Decimal(4)
    assert agents["a2"].occupied == {} and agents["a2"].kernel_count == 0
    tenancy = snapshot.tenancy
    assert tenancy.keypairs["AK1"].max_concurrent_sessions == 5
    assert tenancy.active_sessions["AK1"] == 2
    assert tenancy.project_quotas[seed.project_id].slots == {"cpu": Decimal(10)}
    assert tenancy.domain_quotas["default"].slots == {"cpu": Decimal(20)}
    assert tenancy.project_usage[seed.project_id]["cpu"] == Decimal(4)


async def test_active_sessions_are_counted_only_for_an_owner_whose_policy_caps_them(
    engine: AsyncEngine,
) -> None:
    """The count costs a scan of the owner's sessions every cycle; without a cap nothing reads it."""
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=8)
    await seed.session(cpu=1, status=SessionStatus.RUNNING, agent_id="a1")
    await seed.session(cpu=1)
    async with engine.connect() as conn:
        pending = await fetch_sessions(conn, frozenset({SessionStatus.PENDING}))
        uncapped = (await load_snapshots(conn, pending))["default"].tenancy
    assert uncapped.keypairs["AK1"].max_concurrent_sessions is None
    assert uncapped.active_sessions["AK1"] == 0
    async with engine.begin() as conn:
        await conn.execute(insert(KeypairResourcePolicy).values(name="one", max_concurrent_sessions=1))
        await conn.execute(update(Keypair).where(Keypair.access_key == "AK1").values(resource_policy="one"))
    async with engine.connect() as conn:
        snapshot = (await load_snapshots(conn, pending))["default"]
    assert snapshot.tenancy.active_sessions["AK1"] == 1
    # and the cap holds: the waiting session is not placed while the running one lives
    plan = await provisioner_for(snapshot).plan_cooperatively(pending, snapshot)
    assert not plan.placements
    assert plan.waiting[pending[0].id] == at_concurrency_limit(1, 1)
