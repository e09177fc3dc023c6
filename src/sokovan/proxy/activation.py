"""Scale from zero (CONTRACT section 12): holding a request until its deployment has a replica.

A request for an autoscaled deployment with no HEALTHY endpoint in the routing table is held (after
the token check and the limits, still holding its slot) up to the entry's `activation_timeout`,
counted as `waiting` in the proxy's load, which is what makes the autoscaler start a replica. The
table follower calls `TableSignal.applied()` after every table it applies; each held request then
looks again, and is forwarded as soon as an endpoint is there. Past the timeout the caller answers
503. A deployment that is not autoscaled is never held: no replica is a 503 at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable


class TableSignal:
    """Wakes every waiter when a table is applied."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def applied(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def wait(self, seconds: float) -> None:
        """Until the next table is applied or `seconds` pass."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), seconds)


async def await_endpoints(signal: TableSignal, look: Callable[[], list[str]], within: float) -> list[str]:
    """`look()` until it names endpoints, again after each table applied, for at most `within`
    seconds; [] when none came."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not (found := look()):
        left = deadline - loop.time()
        if left <= 0:
            return []
        await signal.wait(left)
    return found
