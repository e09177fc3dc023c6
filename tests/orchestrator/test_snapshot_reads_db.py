"""A placement cycle's picture of the cluster is read in a fixed handful of statements: the owners'
policies with their active sessions, the projects' and domains' quotas together, every agent's
occupancy (slots and kernel count) in one, and, for a fleet unchanged since the last cycle, one
statement for the agents."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import SessionStatus
from sokovan.db.models import Domain, Project
from sokovan.orchestrator.provisioner.loader import load_snapshots
from sokovan.state.session_reads import fetch_sessions
from tests.orchestrator.db_seed import Seed
from tests.support import statements_sent


async def test_a_cycles_snapshot_is_six_statements_and_holds_what_the_tables_say(engine: AsyncEngine) -> None:
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
    async with engine.connect() as conn:
        pending = await fetch_sessions(conn, frozenset({SessionStatus.PENDING}))
        await load_snapshots(conn, pending)  # the fleet's capacity is parsed once
        with statements_sent(engine) as sent:
            snapshot = (await load_snapshots(conn, pending))["default"]
    # keypairs, quotas, usage (there are quotas), occupancy, agents, the group, nominations
    assert len(sent) == 7, sent
    agents = {a.id: a for a in snapshot.agents}
    assert agents["a1"].occupied == {"cpu": Decimal(4), "mem": Decimal(3 * 2**30)}
    assert agents["a1"].kernel_count == 3
    assert agents["a1"].free["cpu"] == Decimal(4)
    assert agents["a2"].occupied == {} and agents["a2"].kernel_count == 0
    tenancy = snapshot.tenancy
    assert tenancy.active_sessions["AK1"] == 2
    assert tenancy.project_quotas[seed.project_id].slots == {"cpu": Decimal(10)}
    assert tenancy.domain_quotas["default"].slots == {"cpu": Decimal(20)}
    assert tenancy.project_usage[seed.project_id]["cpu"] == Decimal(4)
