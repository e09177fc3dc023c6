"""An API served over real PostgreSQL/Redis/etcd: bootstrap, two agents, an admin and a user.

The context probes its peers as the daemon's does (`manager.peer_watch`), so a request is cut short
only when a peer goes silent, not when a loaded CI machine makes a read slower than the clock-only
deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aetcd
import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import HintPublisher
from sokovan.bus.user_events import UserEventPublisher
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.settings import Settings
from sokovan.db.models import Agent, AuditLog, Kernel, Session, User
from sokovan.manager.api import create_app
from sokovan.manager.context import ManagerContext
from sokovan.manager.peer_watch import manager_peers
from sokovan.manager.repositories.tenancy import bootstrap, create_keypair


@dataclass
class Api:
    client: TestClient  # type: ignore[type-arg]
    engine: AsyncEngine
    admin: dict[str, str]
    alice: dict[str, str]
    bob: dict[str, str]

    async def create(self, headers: dict[str, str], **body: Any) -> Any:
        payload = {"image": "python:3", "type": "batch", "command": "echo hi", **body}
        return await self.client.post("/v2/sessions", json=payload, headers=headers)

    async def counts(self) -> tuple[int, int, int]:
        async with self.engine.connect() as conn:
            return (
                (await conn.execute(select(func.count()).select_from(Session))).scalar_one(),
                (await conn.execute(select(func.count()).select_from(Kernel))).scalar_one(),
                (await conn.execute(select(func.count()).select_from(AuditLog))).scalar_one(),
            )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def user_id(api: Api, name: str) -> str:
    async with api.engine.connect() as conn:
        return str((await conn.execute(select(User.id).where(User.name == name))).scalar_one())


async def add_agent(engine: AsyncEngine, agent_id: str, **overrides: Any) -> None:
    values: dict[str, Any] = {
        "id": agent_id,
        "status": "READY",
        "scaling_group": "default",
        "available_slots": {"cpu": "4", "mem": "8589934592"},
        "images": ["python:3", "shell"],
        "rpc_addr": "127.0.0.1:1",  # nothing listens there: logs report the agent unreachable
        "boot_id": "boot-1",
        **overrides,
    }
    async with engine.begin() as conn:
        await conn.execute(insert(Agent).values(**values))


@pytest.fixture
async def ctx(
    settings: Settings, engine: AsyncEngine, redis: aioredis.Redis, etcd: aetcd.Client
) -> AsyncIterator[ManagerContext]:
    rpc = AgentRPCClient(settings.cluster_secret or "secret", timeout=2.0)
    peers, postgres_probe = manager_peers(settings.db_url, redis, etcd)
    stop = asyncio.Event()
    watching = asyncio.create_task(peers.run(stop))
    yield ManagerContext(
        settings=settings,
        engine=engine,
        redis=redis,
        etcd=etcd,
        hints=HintPublisher(redis, settings.etcd_prefix),
        rpc=rpc,
        peers=peers,
    )
    stop.set()
    await watching
    await postgres_probe.close()
    await rpc.close()


@pytest.fixture
async def api(ctx: ManagerContext) -> AsyncIterator[Api]:
    _, admin_token = await bootstrap(ctx.engine)
    async with ctx.engine.begin() as conn:
        _, alice_token = await create_keypair(conn, user="alice", project="default")
        _, bob_token = await create_keypair(conn, user="bob", project="default")
    await add_agent(ctx.engine, "agent-1")
    await add_agent(ctx.engine, "agent-2")
    client = TestClient(TestServer(create_app(ctx)))
    await client.start_server()
    yield Api(client, ctx.engine, bearer(admin_token), bearer(alice_token), bearer(bob_token))
    await client.close()


@pytest.fixture
def publisher(ctx: ManagerContext) -> UserEventPublisher:
    """Publishes user events (session, deployment and route transitions) as the orchestrator does."""
    return UserEventPublisher(ctx.redis, ctx.settings.etcd_prefix)
