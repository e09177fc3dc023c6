"""The cost of one schedule cycle: synthetic rows, one ScheduleNewSessions run, timed."""

from __future__ import annotations

import time
import uuid
from typing import Any

from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.config.cluster import ClusterConfig
from sokovan.db.base import Base
from sokovan.db.models import Agent, Domain, Kernel, Keypair, Project, ScalingGroup, Session, User
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from sokovan.orchestrator.schedule.handlers.lifecycle.schedule_new_sessions import ScheduleNewSessions
from sokovan.state.session_queries import BATCH_LIMIT

SLOTS = {"cpu": "1", "mem": str(2**30)}


async def _reset(engine: AsyncEngine, agents: int, pending: int) -> None:
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    user, project = uuid.uuid4(), uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
        await conn.execute(insert(Domain).values(name="default"))
        await conn.execute(insert(Project).values(id=project, name="default", domain_name="default"))
        await conn.execute(insert(User).values(id=user, name="bench", domain_name="default"))
        await conn.execute(
            insert(Keypair).values(
                access_key="AKBENCH", token_hash="x", user_id=user, project_id=project, role="user"
            )
        )
        await conn.execute(insert(ScalingGroup).values(name="default"))
        await conn.execute(
            insert(Agent),
            [
                {
                    "id": f"a{i:05d}",
                    "status": "READY",
                    "scaling_group": "default",
                    "rpc_addr": "127.0.0.1:1",
                    "available_slots": {"cpu": "64", "mem": str(256 * 2**30)},
                    "images": ["python:3"],
                    "boot_id": "b",
                }
                for i in range(agents)
            ],
        )
        sessions = [uuid.uuid4() for _ in range(pending)]
        await conn.execute(
            insert(Session),
            [
                {
                    "id": sid,
                    "name": "b",
                    "access_key": "AKBENCH",
                    "user_id": user,
                    "project_id": project,
                    "domain_name": "default",
                    "scaling_group": "default",
                    "type": "batch",
                    "image": "python:3",
                    "command": "sleep 1",
                    "resources": SLOTS,
                    "status": "PENDING",
                }
                for sid in sessions
            ],
        )
        await conn.execute(
            insert(Kernel),
            [{"session_id": sid, "status": "PENDING", "occupied_slots": SLOTS} for sid in sessions],
        )
        await conn.execute(text("ANALYZE"))


async def cycle_cost(engine: AsyncEngine, agents: int, pending: int) -> dict[str, Any]:
    await _reset(engine, agents, pending)
    coordinator = ScheduleCoordinator(engine, ClusterConfig(), [ScheduleNewSessions(engine)])
    start = time.perf_counter()
    await coordinator.run_handler(ScheduleNewSessions(engine))
    took = time.perf_counter() - start
    async with engine.connect() as conn:
        placed = await conn.scalar(text("SELECT count(*) FROM sessions WHERE status = 'SCHEDULED'"))
    return {
        "agents": agents,
        "pending": pending,
        "cycle_ms": round(took * 1000, 1),
        "placed_in_cycle": placed,
        "batch_limit": BATCH_LIMIT,
    }
