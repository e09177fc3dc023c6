"""Helpers the fixtures of several test packages share."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Protocol

import redis.asyncio as aioredis
from aiohttp import web
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.answer_signing import answer_headers
from sokovan.common.rpc import AGENT_HEADER, NONCE_HEADER


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
    # A thousand keys a SCAN: the events of earlier tests leave many nonce keys for minutes.
    found = [k async for k in client.scan_iter(match=keys, count=1000)]
    if found:
        await client.delete(*found)
    await client.aclose()


@contextmanager
def statements_sent(engine: AsyncEngine) -> Iterator[list[str]]:
    """The statements `engine` sends to the database within the block (an executemany is one)."""
    sent: list[str] = []

    def record(*args: Any) -> None:
        sent.append(str(args[2]))

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


def signed_answer(secret: str, request: web.Request, payload: Any, status: int = 200) -> web.Response:
    """The JSON answer `payload` to the RPC `request`, signed as an agent signs its answers (a
    stand-in agent's; the manager reads no unsigned answer)."""
    response = web.json_response(payload, status=status)
    assert isinstance(response.body, bytes)
    response.headers.update(
        answer_headers(
            secret,
            response.body,
            status=status,
            path=request.path,
            agent_id=request.headers.get(AGENT_HEADER) or "",
            request_nonce=request.headers.get(NONCE_HEADER),
        )
    )
    return response
