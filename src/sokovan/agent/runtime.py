"""What a real agent and a hollow fleet share around their RPC server: the Redis connection and
the one outbox on it, the checks that make a start fail, and the end of their background tasks.

Both refuse to start without a cluster secret. `AgentLink.open` checks that Redis answers, then
binds the RPC server; when either fails the Redis connection is closed again and the start is an
`AgentStartError`, so a failed start leaves nothing open.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from sokovan.agent.outbox import EventOutbox
from sokovan.agent.rpc_server import RPCServer
from sokovan.common.settings import Settings


class AgentStartError(RuntimeError):
    """The daemon cannot start (no secret, port taken, Redis unreachable)."""


class AgentLink:
    """One agent process's Redis connection, the outbox on it, and its background tasks."""

    def __init__(self, settings: Settings, drop_events: frozenset[str]) -> None:
        if not settings.cluster_secret:
            raise AgentStartError("SOKOVAN_CLUSTER_SECRET is not set: the agent refuses to start")
        self.secret: str = settings.cluster_secret
        self._redis_url = settings.redis_url
        self.redis = aioredis.Redis.from_url(settings.redis_url)
        self.outbox = EventOutbox(self.redis, settings.etcd_prefix, self.secret, drop_events=drop_events)
        self.tasks: list[asyncio.Task[None]] = []

    async def open(self, rpc: RPCServer, what: str, prepare: Callable[[], object] | None = None) -> None:
        """Check that Redis answers, then `prepare()` and bind `rpc` (`what` names it in the error)."""
        try:
            await self.redis.ping()
        except (RedisError, OSError) as exc:
            await self.redis.aclose()
            raise AgentStartError(f"cannot reach Redis at {self._redis_url}: {exc}") from exc
        try:
            if prepare is not None:
                prepare()
            await rpc.start()
        except OSError as exc:
            await self.redis.aclose()
            raise AgentStartError(f"cannot start {what}: {exc}") from exc

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """A background task, cancelled by `close()`."""
        task = asyncio.create_task(coro, name=name)
        self.tasks.append(task)
        return task

    async def close(self) -> None:
        """Cancel the background tasks, wait for them, and close the Redis connection."""
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.redis.aclose()
