"""AgentStatics against real PostgreSQL: an agent's capacity and images are parsed again exactly
when they change, and a read that finds nothing changed is one statement."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace
from typing import Any

from sqlalchemy import delete, func, insert, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus
from sokovan.db.models import Agent, ScalingGroup
from sokovan.orchestrator.provisioner.agent_statics import _AGENTS, AgentStatics
from sokovan.orchestrator.provisioner.selectors import scoring
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, ScalingGroupSnapshot
from tests.orchestrator.db_seed import Seed
from tests.support import statements_sent


async def _read(engine: AsyncEngine, cache: AgentStatics) -> tuple[dict[str, Any], int]:
    with statements_sent(engine) as statements:
        async with engine.connect() as conn:
            agents = await cache.read(conn, ["default"])
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
    assert statements == 2  # the version tokens and agents, then the columns of the agents never seen
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


async def test_an_unchanged_fleet_is_not_read_again_and_any_change_to_what_placement_reads_is(
    engine: AsyncEngine,
) -> None:
    seed = await Seed(engine).tenancy()
    for i in range(3):
        await seed.agent(f"a{i}", cpu=4)
    cache = AgentStatics()
    async with engine.connect() as conn:
        first = await cache.read(conn, ["default"])
    # A heartbeat's own columns are not what placement reads: the same list, not rebuilt.
    async with engine.begin() as conn:
        await conn.execute(
            update(Agent).values(last_heartbeat_at=func.now(), heartbeat_seq=Agent.heartbeat_seq + 1)
        )
    async with engine.connect() as conn:
        again = await cache.read(conn, ["default"])
    assert [a.id for a in again] == ["a0", "a1", "a2"]
    assert all(x is y for x, y in zip(first, again, strict=True))
    # Each of status, schedulable, the kernel limit and capacity is read again when it changes.
    for values in (
        {"status": "DOWN"},
        {"schedulable": False},
        {"max_kernels": 7},
        {"available_slots": {"cpu": "9"}},
    ):
        async with engine.begin() as conn:
            await conn.execute(update(Agent).where(Agent.id == "a1").values(**values))
        async with engine.connect() as conn:
            changed = {a.id: a for a in await cache.read(conn, ["default"])}
        assert changed["a0"].statics is first[0].statics  # parsed once
        got = changed["a1"]
        column = next(iter(values))
        seen = got.statics.available["cpu"] if column == "available_slots" else getattr(got, column)
        assert seen == (Decimal(9) if column == "available_slots" else values[column])
    # A new agent and a removed one.
    await seed.agent("a3", cpu=4)
    async with engine.begin() as conn:
        await conn.execute(delete(Agent).where(Agent.id == "a0"))
    async with engine.connect() as conn:
        assert [a.id for a in await cache.read(conn, ["default"])] == ["a1", "a2", "a3"]


async def test_agents_of_one_shape_share_their_capacity_and_the_index_looks_at_it_once(
    engine: AsyncEngine,
) -> None:
    seed = await Seed(engine).tenancy()
    for name, cpu in (("a1", 4), ("a2", 4), ("a3", 8), ("a4", 4)):
        await seed.agent(name, cpu=cpu)
    async with engine.connect() as conn:
        agents = {a.id: a.statics for a in await AgentStatics().read(conn, ["default"])}
    assert agents["a1"].available is agents["a2"].available
    assert agents["a1"].images is agents["a2"].images
    assert agents["a3"].available is not agents["a1"].available
    assert agents["a3"].available["cpu"] == Decimal(8) and agents["a1"].available["cpu"] == Decimal(4)
    # The placement index computes a shared free room once per object, and still orders by room.
    snapshot = ScalingGroupSnapshot(
        name="default",
        scheduler="fifo",
        agent_selection="concentrated",
        agents=[
            AgentSnapshot(i, AgentStatus.READY, True, s.available, ResourceSlots(), 0, None, s.images)
            for i, s in agents.items()
        ],
    )
    snapshot.agents[0].take(ResourceSlots({"cpu": Decimal(1)}), 1)
    calls: list[str] = []
    original = scoring.free_room

    def counted(agent: AgentSnapshot, priority: tuple[str, ...]) -> tuple[Decimal, ...]:
        calls.append(agent.id)
        return original(agent, priority)

    scoring.free_room = counted
    try:
        index = scoring.FreeRoomIndex(snapshot)
    finally:
        scoring.free_room = original
    # a1 took room (its own object); a2 and a4 hold nothing: their free room is the shape's, once.
    assert sorted(calls) == ["a1", "a2", "a3"]
    need = SimpleNamespace(resources=ResourceSlots({"cpu": Decimal(1)}))
    order = [a.id for a in index.walk(need, descending=False)]  # type: ignore[arg-type]
    assert order == ["a1", "a2", "a4", "a3"]


async def _tokens(engine: AsyncEngine) -> dict[str, str]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT scaling_group, CAST(version AS TEXT) FROM agent_set_versions"))
        return {g: v for g, v in rows}


async def test_the_version_token_changes_at_the_writers_commit_and_only_for_what_placement_reads(
    engine: AsyncEngine,
) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=4)
    async with engine.begin() as conn:
        await conn.execute(insert(ScalingGroup).values(name="other"))
    before = await _tokens(engine)
    assert set(before) == {"default"}
    # A heartbeat's own columns, and a write of the same values, change nothing.
    async with engine.begin() as conn:
        await conn.execute(
            update(Agent).values(
                last_heartbeat_at=func.now(), heartbeat_seq=Agent.heartbeat_seq + 1, status="READY"
            )
        )
    assert await _tokens(engine) == before
    # A change is seen by others only with the writer's commit: a reader in between keeps the list
    # it had, and reads the agents again once the change is committed.
    cache = AgentStatics()
    async with engine.connect() as conn:
        await cache.read(conn, ["default"])
    async with engine.connect() as writer:
        await writer.execute(update(Agent).where(Agent.id == "a1").values(status="DEGRADED"))
        assert await _tokens(engine) == before
        got, statements = await _read(engine, cache)
        assert (got["a1"][0], statements) == ("READY", 1)
        await writer.commit()
    changed = await _tokens(engine)
    assert changed["default"] != before["default"]
    got, statements = await _read(engine, cache)
    assert (got["a1"][0], statements) == ("DEGRADED", 1)
    # Moving an agent to another group changes both groups' tokens.
    async with engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "a1").values(scaling_group="other"))
    moved = await _tokens(engine)
    assert moved["default"] != changed["default"] and "other" in moved
    assert (await _read(engine, cache))[0] == {}
    # Emptying the table (as the tests' fixture does) changes every token.
    async with engine.begin() as conn:
        await conn.execute(text("TRUNCATE agents CASCADE"))
    assert all(moved[g] != v for g, v in (await _tokens(engine)).items())


async def test_an_unchanged_fleet_is_an_index_probe_and_the_agents_are_never_scanned(
    engine: AsyncEngine,
) -> None:
    seed = await Seed(engine).tenancy()
    for i in range(3):
        await seed.agent(f"a{i}", cpu=4)
    known = ",".join(f"{g}:{v}" for g, v in sorted((await _tokens(engine)).items()))
    async with engine.connect() as conn:
        plan = "\n".join(
            await conn.scalars(
                text(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {_AGENTS.text}"),
                {"groups": ["default"], "known": known},
            )
        )
        other = "\n".join(
            await conn.scalars(
                text(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {_AGENTS.text}"),
                {"groups": ["default"], "known": "stale"},
            )
        )
    # The agents' branch is gated by a one-time filter on the tokens: not run when they are known.
    agents_scan = [line for line in plan.splitlines() if " on agents" in line]
    assert agents_scan and all("never executed" in line for line in agents_scan), plan
    assert any(" on agents" in line and "never executed" not in line for line in other.splitlines()), other
