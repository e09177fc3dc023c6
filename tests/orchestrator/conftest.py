"""Fixtures of the orchestrator's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.agent.rpc_server import RPCServer
from sokovan.common.rpc import AgentRPCClient
from tests.orchestrator.db_seed import Seed
from tests.orchestrator.test_rpc_batches_db import SECRET


@pytest.fixture
async def served(engine: AsyncEngine) -> AsyncIterator[tuple[Seed, AgentRPCClient, list[RPCServer]]]:
    """A seeded tenancy, an agent RPC client, and the agent RPC servers a test starts (`serve`),
    stopped after it."""
    servers: list[RPCServer] = []
    client = AgentRPCClient(SECRET, timeout=30)
    yield await Seed(engine).tenancy(), client, servers
    for server in servers:
        await server.stop()
    await client.close()
