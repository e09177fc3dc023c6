"""A flush that runs at most once per window, leading edge first.

`Throttle.soon()` asks for a run of the flush. When none ran in the last `window` seconds it runs
at once, so a lone request is not held back by the window; otherwise it runs once the window since
the last run has passed, and takes everything asked for meanwhile with it. What is asked for
while a run is under way gets one more run after it (never left for the next request to carry).
At most one run is under way at a time.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable


class Throttle:
    def __init__(self, flush: Callable[[], Awaitable[None]], window: float) -> None:
        self._flush = flush
        self._window = window
        self._task: asyncio.Task[None] | None = None
        self._last = -math.inf  # (loop time) when the last run started
        self._again = False  # asked for while a run waited or ran

    def soon(self) -> None:
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.create_task(self._runs())

    async def _runs(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            wait = self._last + self._window - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            self._again = False  # this run takes what was asked for until now
            self._last = loop.time()
            await self._flush()
            if not self._again:
                return
