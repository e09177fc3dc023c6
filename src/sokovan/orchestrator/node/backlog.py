"""Whether the managers lag behind the agents' event stream.

Heartbeats travel with kernel events, so while the managers have many unread events an agent's
silence may be our own delay: no agent is judged silent then (it will be once the backlog is read).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)

# More unread agent events than this and agents are not judged silent (about one read batch).
BACKLOG_LIMIT = 1000


class Backlog:
    def __init__(
        self, unread: Callable[[], Awaitable[int]] | None = None, limit: int = BACKLOG_LIMIT
    ) -> None:
        self._unread = unread
        self._limit = limit

    async def lagging(self) -> bool:
        if self._unread is None:
            return False
        unread = await self._unread()
        if unread > self._limit:
            log.warning("agents.silence_check_deferred", backlog=unread)
            return True
        return False
