"""Helpers the fixtures of several test packages share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

import redis.asyncio as aioredis


class Stoppable(Protocol):
    async def stop(self) -> None: ...


@asynccontextmanager
async def stopped_after() -> AsyncIterator[list[Stoppable]]:
    """A list for what a fixture starts (agents, fleets, proxies, replicas); each is stopped, in
    order, when the block ends."""
    started: list[Stoppable] = []
    yield started
    for thing in started:
        await thing.stop()


@asynccontextmanager
async def scratch_redis(url: str, keys: str) -> AsyncIterator[aioredis.Redis]:
    """A client of the Redis at `url`; the keys matching the pattern `keys` are deleted afterwards."""
    client = aioredis.Redis.from_url(url)
    yield client
    found = [k async for k in client.scan_iter(match=keys)]
    if found:
        await client.delete(*found)
    await client.aclose()
