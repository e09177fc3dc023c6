"""How an agent process is told to stop, and whether its kernels go with it.

SIGINT (Ctrl-C, and what the test harness sends) stops the agent the way it always did: every
kernel is destroyed and reported first. SIGTERM (what a service manager sends on restart or
upgrade) stops the agent but leaves its kernels running, recorded in the state file, for the next
start to take over. `StopSignal` is the one event both set (like `sokovan.common.lifecycle`'s
`stop_on_signals`), and it remembers which signal came first.
"""

from __future__ import annotations

import asyncio
import signal


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
