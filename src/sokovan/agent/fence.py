"""Fencing: an agent cut off from the cluster does not keep running work the manager has moved.

The manager declares a silent agent DOWN after `heartbeat_timeout` plus its class's grace (CONTRACT
section 7) and retries its sessions elsewhere; nothing it sends can reach the far side of a
partition. So the agent keeps the same clock on its side: from the last heartbeat Redis took
(`EventOutbox.last_heartbeat_at`), once the silence is longer than the timeout plus the grace of its
class, it stops its kernels itself (`standard`, `borrowed`) or keeps them and says so, waiting for an
operator (`sensitive`, seed 002). Its clock starts no later than the manager's (the manager's last
beat is at best the agent's last delivered one), so the old copy is gone by the time the retry may
start, give or take the kill grace.

Their ends are reported "lost" (AGENT_TRANSIENT, so retried), not "destroyed": the retry does not
depend on the manager having declared the agent DOWN before it hears of them. Each fence starts a
new registration epoch; every kernel is recorded with the epoch it was started
in (`started`), so what a fence stops is exactly what was started before it. When the beats get
through again, the manager ends there every kernel it ended meanwhile (its leak repair, on the
first heartbeat that lists them): for a `sensitive` agent that is where its kept kernels end, if
their sessions were retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import structlog

from sokovan.common.types import AgentClass
from sokovan.config.cluster import NodeLifecycleSettings

log = structlog.get_logger(__name__)

CHECK_EVERY = 0.5  # seconds between looks at the silence
KEEPS_KERNELS = frozenset({AgentClass.SENSITIVE})


class Fence:
    """The agent's side of the node lifecycle's clock; `run()` as a background task."""

    def __init__(
        self,
        agent_class: AgentClass,
        timings: Callable[[], NodeLifecycleSettings],
        last_delivered: Callable[[], float | None],
        running: Callable[[], list[str]],
        stop_kernels: Callable[[list[str]], Awaitable[None]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.agent_class = agent_class
        self.epoch = 1
        self.fenced = False
        self._timings = timings
        self._last_delivered = last_delivered
        self._running = running
        self._stop_kernels = stop_kernels
        self._clock = clock
        self._since = clock()  # before the first beat is delivered, silence counts from the start
        self._epochs: dict[str, int] = {}
        self._stopped: set[str] = set()  # kernels this fence stopped

    def started(self, kernel_id: str) -> None:
        """Record a kernel's start in the epoch now in force."""
        self._epochs.setdefault(kernel_id, self.epoch)

    def epoch_of(self, kernel_id: str) -> int | None:
        return self._epochs.get(kernel_id)

    def stopped_by_fence(self, kernel_id: str) -> bool:
        """Whether the fence stopped this kernel (its end is reported "lost", once)."""
        if kernel_id in self._stopped:
            self._stopped.discard(kernel_id)
            return True
        return False

    def limit(self) -> float:
        """How long a silence may last before the manager calls this agent DOWN."""
        timings = self._timings()
        return timings.heartbeat_timeout + timings.grace_period.of(self.agent_class.value)

    def silence(self) -> float:
        delivered = self._last_delivered()
        return self._clock() - (self._since if delivered is None else max(delivered, self._since))

    async def check(self) -> list[str]:
        """Fence when the silence has passed the limit (once per silence); the kernels stopped."""
        silent, limit = self.silence(), self.limit()
        running = self._running()
        if len(self._epochs) > 2 * len(running) + 64:  # forget the kernels that ended
            live = set(running)
            self._epochs = {k: e for k, e in self._epochs.items() if k in live}
        if silent <= limit:
            if self.fenced:
                self.fenced = False
                log.warning("agent.reconnected", epoch=self.epoch, after=round(silent, 1))
            return []
        if self.fenced:
            return []
        self.fenced = True
        self.epoch += 1
        older = [k for k in running if self._epochs.get(k, 0) < self.epoch]
        if self.agent_class in KEEPS_KERNELS:
            log.error(
                "agent.partitioned_keeping_kernels",
                agent_class=self.agent_class.value,
                silent_for=round(silent, 1),
                kernels=len(older),
                note="an operator decides; kernels the manager ended are stopped when it is reached again",
            )
            return []
        log.error(
            "agent.fenced",
            agent_class=self.agent_class.value,
            silent_for=round(silent, 1),
            limit=limit,
            epoch=self.epoch,
            kernels=older,
        )
        if older:
            self._stopped.update(older)
            await self._stop_kernels(older)
        return older

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            await self.check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), CHECK_EVERY)
