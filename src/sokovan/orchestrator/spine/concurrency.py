"""Bounded concurrency for handlers that make one call per row (create or end a replica session):
the calls overlap their waits, and no more than `limit` run at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TypeVar

T = TypeVar("T")
LIMIT = 16


async def bounded_gather(calls: Sequence[Awaitable[T]], limit: int = LIMIT) -> list[T]:
    """Await every call, at most `limit` at a time; results in the order of `calls`."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Awaitable[T]) -> T:
        async with gate:
            return await call

    return list(await asyncio.gather(*(one(c) for c in calls)))
