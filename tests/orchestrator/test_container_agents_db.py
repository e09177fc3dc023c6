"""Agents of every backend against real PostgreSQL: what a heartbeat stores (the offered list of
`common.image_refs`, the backend), that a beat changing only the backend leaves placement's agent-set
version alone, and which agents admission counts as offering an image (one `?|` over the list)."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.events import AgentHeartbeat
from sokovan.common.image_refs import stored_images
from sokovan.db.models import Agent, AgentSetVersion
from sokovan.manager.controller.admission_cache import CapacityCache
from sokovan.manager.repositories import agents as agents_repo
from sokovan.manager.repositories.agents import record_heartbeats
from tests.orchestrator.db_seed import Seed
from tests.support import statements_sent

REGISTRY = "127.0.0.1:5000"


def beat(agent_id: str, seq: int, **fields: Any) -> AgentHeartbeat:
    values: dict[str, Any] = {
        "agent_id": agent_id,
        "seq": seq,
        "boot_id": "b",
        "available_slots": {"cpu": "4", "mem": str(8 * 2**30)},
        "images": ["python:3", "shell"],
        "rpc_addr": "127.0.0.1:1",
        **fields,
    }
    return AgentHeartbeat(**values)


CONTAINER = {"images": [f"{REGISTRY}/python:3"], "registries": [REGISTRY], "backend": "container"}


async def rows(engine: AsyncEngine) -> dict[str, tuple[list[str], str]]:
    async with engine.connect() as conn:
        return {
            r.id: (r.images, r.backend)
            for r in await conn.execute(select(Agent.id, Agent.images, Agent.backend))
        }


async def version(engine: AsyncEngine) -> uuid.UUID:
    async with engine.connect() as conn:
        found: uuid.UUID = (
            await conn.execute(
                select(AgentSetVersion.version).where(AgentSetVersion.scaling_group == "default")
            )
        ).scalar_one()
    return found


async def test_a_beat_stores_the_offered_list_and_the_backend(engine: AsyncEngine) -> None:
    await Seed(engine).tenancy()
    first = [
        beat("ctr", 1, **CONTAINER),
        beat("proc", 1),  # a process agent of before: no registries, no backend named
        beat("hollow", 1, backend="hollow"),
        beat("odd", 1, backend="a-backend-nobody-knows"),
    ]
    await record_heartbeats(engine, first)  # registered (inserted)
    want = {
        "ctr": (["*", f"{REGISTRY}/*", f"{REGISTRY}/python:3", "python:3"], "container"),
        "proc": (["python:3", "shell"], "process"),
        "hollow": (["python:3", "shell"], "hollow"),
        "odd": (["python:3", "shell"], "process"),
    }
    assert await rows(engine) == want
    # Refreshed (updated) in one statement, as before: the groups, the lock, the refresh.
    with statements_sent(engine) as sent:
        await record_heartbeats(engine, [b.model_copy(update={"seq": 2}) for b in first])
    assert len(sent) == 3
    assert await rows(engine) == want
    # A container agent that pulled an image and learned a second registry.
    grown = beat("ctr", 3, **{**CONTAINER, "images": [f"{REGISTRY}/python:3", f"{REGISTRY}/shell:latest"]})
    await record_heartbeats(engine, [grown.model_copy(update={"registries": [REGISTRY, "mirror.local"]})])
    assert (await rows(engine))["ctr"] == (
        [
            "*",
            f"{REGISTRY}/*",
            f"{REGISTRY}/python:3",
            f"{REGISTRY}/shell:latest",
            "mirror.local/*",
            "python:3",
            "shell",
            "shell:latest",
        ],
        "container",
    )


async def test_a_beat_changing_only_the_backend_bumps_no_agent_set_version(engine: AsyncEngine) -> None:
    await Seed(engine).tenancy()
    await record_heartbeats(engine, [beat("n1", 1)])
    before = await version(engine)
    await record_heartbeats(engine, [beat("n1", 2, backend="hollow")])
    assert (await rows(engine))["n1"][1] == "hollow"
    assert await version(engine) == before  # placement reads no backend
    # What it offers is what placement reads: a registry learned is a new version.
    await record_heartbeats(engine, [beat("n1", 3, backend="hollow", registries=[REGISTRY])])
    assert await version(engine) != before


def test_the_stored_list_is_built_once_per_distinct_lists() -> None:
    agents_repo._stored.cache_clear()
    now = beat("x", 1).at
    for i in range(50):  # a hollow fleet: every agent beats the same lists
        agents_repo._beat_columns(beat(f"h{i}", 1, backend="hollow"), now)
    agents_repo._beat_columns(beat("c", 1, **CONTAINER), now)
    info = agents_repo._stored.cache_info()
    assert (info.misses, info.hits) == (2, 49)


@pytest.mark.parametrize(
    ("image", "cpus"),
    [
        ("python:3", [4, 8]),  # the container agent holds it by its short name too
        ("shell", [4, 8]),  # the container agent may pull it from its default registry
        ("nosuch:1", [4]),  # a short name: only the container agent may try to pull it
        (f"{REGISTRY}/anything:1", [4]),
        (f"{REGISTRY}/python:3", [4]),
        ("other.registry:5000/x:1", []),
        ("python", [4]),  # python:latest: the process agent holds python:3 only
    ],
)
async def test_admission_counts_the_agents_that_hold_or_may_pull_the_image(
    engine: AsyncEngine, image: str, cpus: list[int]
) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("ctr", cpu=4)
    await seed.agent("proc", cpu=8)
    async with engine.begin() as conn:
        await conn.execute(
            update(Agent)
            .where(Agent.id == "ctr")
            .values(images=stored_images([f"{REGISTRY}/python:3"], [REGISTRY]), backend="container")
        )
    async with engine.connect() as conn:
        shapes = await CapacityCache(ttl=0).lookup(conn, "default", image)
    assert shapes is not None
    assert sorted(a.available["cpu"] for a in shapes[1]) == [Decimal(c) for c in cpus]
