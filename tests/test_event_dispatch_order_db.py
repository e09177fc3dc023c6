"""The event dispatcher applies a read's kernel events (and the promotions they complete) before
the same read's heartbeats: sessions wait on the former, nothing waits on the latter."""

from __future__ import annotations

from collections.abc import Sequence

import redis.asyncio as aioredis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import HintPublisher
from sokovan.common.events import AgentEvent, KernelRunning
from sokovan.common.settings import Settings
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Agent, Kernel
from sokovan.manager.event_dispatch import EventDispatcher
from sokovan.state.kernel_writes import KernelMove
from tests.orchestrator.db_seed import Seed
from tests.orchestrator.test_node_lifecycle_db import beat


async def test_kernel_events_and_their_promotions_go_before_the_heartbeats_of_the_same_read(
    engine: AsyncEngine, settings: Settings
) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("n1")
    sid = await seed.session(
        status=SessionStatus.CREATING, agent_id="n1", kernel_status=KernelStatus.CREATING
    )
    async with engine.connect() as conn:
        kid = (await conn.execute(select(Kernel.id).where(Kernel.session_id == sid))).scalar_one()
    seen: list[tuple[int, int]] = []

    async def follow(moves: Sequence[KernelMove]) -> None:
        async with engine.connect() as conn:
            seq = (await conn.execute(select(Agent.heartbeat_seq).where(Agent.id == "n1"))).scalar_one()
        seen.append((len(moves), seq))

    # Nothing here is hinted (the move is followed, the agent was READY): the client stays unused.
    redis = aioredis.Redis.from_url(settings.redis_url)
    dispatch = EventDispatcher(engine, HintPublisher(redis, "test-dispatch-order"), follow=follow)
    batch: list[AgentEvent] = [
        beat("n1", 7),
        KernelRunning(kernel_id=str(kid), agent_id="n1", session_id=str(sid)),
    ]
    await dispatch(batch)
    await redis.aclose()
    assert seen == [(1, 0)]  # the kernel moved and was followed before the beat was written
    async with engine.connect() as conn:
        assert (await conn.execute(select(Agent.heartbeat_seq).where(Agent.id == "n1"))).scalar_one() == 7
