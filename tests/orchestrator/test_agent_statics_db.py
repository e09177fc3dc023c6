"""AgentStatics against real PostgreSQL: an agent's capacity and images are parsed again exactly
when they change, and a read that finds nothing changed is one statement."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import event, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.db.models import Agent
from sokovan.orchestrator.provisioner.agent_statics import AgentStatics
from tests.orchestrator.db_seed import Seed


async def _read(engine: AsyncEngine, cache: AgentStatics) -> tuple[dict[str, Any], int]:
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(str(args[2]))

    event.listen(engine.sync_engine, "before_cursor_execute", count)
    try:
        async with engine.connect() as conn:
            agents = await cache.read(conn, ["default"])
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", count)
    return {a.id: (a.status, a.statics.available["cpu"], sorted(a.statics.images)) for a in agents}, len(
        statements
    )


async def test_capacity_and_images_are_parsed_again_only_when_they_change(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=4)
    await seed.agent("a2", cpu=8)
    cache = AgentStatics()
    got, statements = await _read(engine, cache)
    assert got == {
        "a1": ("READY", Decimal(4), ["python:3", "shell"]),
        "a2": ("READY", Decimal(8), ["python:3", "shell"]),
    }
    assert statements == 2  # the digests, then the columns of the agents never seen
    got_again, statements = await _read(engine, cache)
    assert (got_again, statements) == (got, 1)
    # A status change needs no parse; a new capacity or image list is parsed again.
    async with engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "a1").values(status="DEGRADED"))
        await conn.execute(
            update(Agent).where(Agent.id == "a2").values(available_slots={"cpu": "16"}, images=["shell"])
        )
    got, statements = await _read(engine, cache)
    assert got == {
        "a1": ("DEGRADED", Decimal(4), ["python:3", "shell"]),
        "a2": ("READY", Decimal(16), ["shell"]),
    }
    assert statements == 2
    # Two caches (two managers) see the same.
    assert (await _read(engine, AgentStatics()))[0] == got
