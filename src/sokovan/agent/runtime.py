"""What a real agent and a hollow fleet share around their RPC server: the Redis connection and
the one outbox on it, the checks that make a start fail, and the end of their background tasks.

Both refuse to start without a cluster secret. `AgentLink.open` waits for Redis to answer (for as
long as it is away, one log line per attempt, until the daemon is told to stop), then binds the RPC
server; when that fails the Redis connection is closed again and the start is an `AgentStartError`,
so a failed start leaves nothing open. A background task that dies on an error sets the daemon's
stop event and is kept as `failure`, so the daemon stops and its command exits non-zero instead
of living on without heartbeats.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import redis.asyncio as aioredis
import structlog

from sokovan.agent.outbox import EventOutbox
from sokovan.agent.rpc_server import RPCServer
from sokovan.common.settings import Settings
from sokovan.common.supervise import wait_for_service

log = structlog.get_logger(__name__)


REDIS_TIMEOUT = 5.0  # seconds for a connect and for an answer
CLOSE_TIMEOUT = 5.0  # seconds the background tasks get to end once cancelled, at a stop


class AgentStartError(RuntimeError):
    """The daemon cannot start (no secret, port taken, Redis unreachable)."""


class AgentLink:
    """One agent process's Redis connection, the outbox on it, and its background tasks."""

    def __init__(self, settings: Settings, drop_events: frozenset[str]) -> None:
        if not settings.cluster_secret:
            raise AgentStartError("SOKOVAN_CLUSTER_SECRET is not set: the agent refuses to start")
        self.secret: str = settings.cluster_secret
        self._redis_url = settings.redis_url
        # A silent Redis (packets dropped) fails a publish after REDIS_TIMEOUT, and the outbox
        # retries on a new connection, instead of waiting for TCP to give up (minutes).
        self.redis = aioredis.Redis.from_url(
            settings.redis_url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT
        )
        self.outbox = EventOutbox(self.redis, settings.etcd_prefix, self.secret, drop_events=drop_events)
        self.tasks: list[asyncio.Task[None]] = []
        self.stop = asyncio.Event()
        self.failure: str | None = None

    def watch(self, stop: asyncio.Event) -> None:
        """The event that stops the daemon: ends a wait for Redis, and is set when a task fails."""
        self.stop = stop

    async def open(self, rpc: RPCServer, what: str, prepare: Callable[[], object] | None = None) -> None:
        """Wait until Redis answers, then `prepare()` and bind `rpc` (`what` names it in the error)."""
        try:
            answered = await wait_for_service("redis", self.redis.ping, self.stop)
        except Exception as exc:
            await self.redis.aclose()
            raise AgentStartError(f"cannot use Redis at {self._redis_url}: {exc}") from exc
        if answered is None:
            await self.redis.aclose()
            raise AgentStartError(f"stopped while waiting for Redis at {self._redis_url}")
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
        task.add_done_callback(self._ended)
        self.tasks.append(task)
        return task

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        self.failure = f"{task.get_name()} failed: {error!r}"
        log.error("agent.task_failed", task=task.get_name(), error=repr(error))
        self.stop.set()

    async def close(self) -> None:
        """Cancel the background tasks, wait for them (at most `CLOSE_TIMEOUT`), and close the
        Redis connection. A task that does not end when cancelled (a client library's close that
        waits on a peer) is logged and left behind: it must not keep the daemon from stopping."""
        for task in self.tasks:
            task.cancel()
        if self.tasks:
            _, stuck = await asyncio.wait(self.tasks, timeout=CLOSE_TIMEOUT)
            if stuck:
                log.warning("agent.tasks_left_at_stop", tasks=sorted(t.get_name() for t in stuck))
        await self.redis.aclose()
