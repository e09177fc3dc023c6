"""What the daemons (an agent, a hollow fleet, the app proxy) share: start, run until told, stop."""

from __future__ import annotations

import asyncio
import signal
from abc import ABC, abstractmethod


def stop_on_signals() -> asyncio.Event:
    """An event that SIGINT or SIGTERM sets (handlers on the running loop): a daemon's stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


class Service(ABC):
    """Something `start()`ed and later `stop()`ped; `run(stop_event)` does both around a wait."""

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    async def run(self, stop: asyncio.Event) -> None:
        """`start()`, wait until `stop` is set, then `stop()` (also when the wait is cancelled)."""
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()
