"""How an agent process is told to stop, and whether its kernels go with it.

SIGINT (Ctrl-C, and what the test harness sends) stops the agent the way it always did: every
kernel is destroyed and reported first. SIGTERM (what a service manager sends on restart or
upgrade) stops the agent but leaves its kernels running, recorded in the state file, for the next
start to take over. `StopSignal` is the one event both set (like `sokovan.common.lifecycle`'s
`stop_on_signals`), and it remembers which signal came first; `run_until` runs a daemon (a process
agent, a hollow fleet) until it is set and stops it accordingly.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Protocol


class StopSignal(asyncio.Event):
    """Set by the first SIGINT or SIGTERM; `detach` tells whether it was SIGTERM."""

    def __init__(self) -> None:
        super().__init__()
        self.signum: signal.Signals | None = None

    @property
    def detach(self) -> bool:
        return self.signum == signal.SIGTERM

    def receive(self, signum: signal.Signals) -> None:
        if self.signum is None:
            self.signum = signum
        self.set()


def stop_on_agent_signals() -> StopSignal:
    """A `StopSignal` that SIGINT and SIGTERM set (handlers on the running loop)."""
    stop = StopSignal()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.receive, signum)
    return stop


class Detachable(Protocol):
    """A daemon whose stop may leave its kernels running."""

    async def start(self) -> None: ...

    async def stop(self, detach: bool = False) -> None: ...


async def run_until(daemon: Detachable, stop: asyncio.Event) -> None:
    """`start()`, wait for `stop`, then `stop()`: leaving the kernels running when `stop` is a
    `StopSignal` set by SIGTERM (any other way out, an error too, destroys them)."""
    await daemon.start()
    try:
        await stop.wait()
    finally:
        await daemon.stop(detach=isinstance(stop, StopSignal) and stop.detach)
