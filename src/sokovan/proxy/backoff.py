"""Exponential backoff for the proxy's Redis loops: an outage is retried, never fatal.

The proxy keeps forwarding with what it last read while Redis is away; each loop that talks to
Redis waits a little longer after every failure (up to a cap) and starts over when a call succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib


class Backoff:
    """Delays `initial, 2·initial, 4·initial, …` capped at `cap`; `reset()` after a success."""

    def __init__(self, initial: float = 0.2, cap: float = 5.0) -> None:
        self._initial = initial
        self._cap = cap
        self._next = initial
        self.failures = 0

    def reset(self) -> None:
        self._next = self._initial
        self.failures = 0

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._cap)
        self.failures += 1
        return delay


async def sleep_unless(stop: asyncio.Event, seconds: float) -> bool:
    """Wait `seconds` or until `stop` is set; True when stopped."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
