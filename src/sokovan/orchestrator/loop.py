"""One generic coordinator loop: a short cycle that runs when hinted and a long cycle that
always runs. Each waits on any(hint, sleep(interval), stop); cycles of one loop never overlap.

A hint to an idle lane starts its cycle at once; hints that arrive while a cycle runs, or within
the debounce (`loops.short_cycle_debounce`) of its end, are coalesced into the next one (batched by
arrival, not by a timer).

A cycle (short or long) that moved nothing spaces the next one out by twice its own duration
(`SPACING`): hints that only add demand (`hint(demand=True)`: creates while every agent is full or
held, which makes the placement lane re-read a window of thousands of waiting sessions) cost a
lane at most a third of its time, and the process's event loop stays free for the API and the
events. Any other hint (room freed, an agent back or undrained, the next step of a hand-off) may
lead somewhere, so it ends that spacing at once: a full cluster places its next session as soon
as one ends, not a whole fruitless cycle later. A cycle that moved something is followed at once.

A cycle that fails never ends its loop: the next one tries again. While PostgreSQL or Redis is
away (`common.outages`), the first failed cycle is logged as a warning and the rest quietly, until
a cycle succeeds again; any other failure is logged with its traceback every time."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable

import structlog

from sokovan.common.metrics import CYCLE_SECONDS, LANE_CYCLES, LANE_HINTS
from sokovan.common.outages import is_outage
from sokovan.common.supervise import describe
from sokovan.common.task_group import run_together

log = structlog.get_logger(__name__)

# After a cycle that moved nothing, the next waits this many times that cycle's length (unless a
# hint that is not only demand arrives): such cycles take at most a third of the lane's time.
SPACING = 2.0


class CoordinatorLoop:
    def __init__(
        self,
        name: str,
        cycle: Callable[[], Awaitable[bool]],
        long_interval: Callable[[], float],
        debounce: Callable[[], float] = lambda: 0.005,
        on_moved: Callable[[], None] | None = None,
        short_cycle: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        """`cycle` returns True when it moved something; then `on_moved` runs (by default the
        loop hints itself, so it runs again at once). `short_cycle`, when given, is what a hint
        runs instead of `cycle` (the long cycle, the safety net, always runs `cycle`)."""
        self.name = name
        self._cycle = cycle
        self._short_cycle = short_cycle or cycle
        self._long_interval = long_interval
        self._debounce = debounce
        self.on_moved: Callable[[], None] = on_moved or self.hint
        self._hint = asyncio.Event()
        self._news = asyncio.Event()  # a hint that is not only demand is waiting
        self._lock = asyncio.Lock()
        self._away = False  # the last cycle failed because a service is unreachable
        self._quiet_until = 0.0  # (monotonic) no short cycle before this
        self._ended = -math.inf  # (monotonic) when the last short cycle ended
        # Whether this process holds the lane (its cycles and hints are counted only then: in
        # another worker or manager the loop runs, but its cycles find the lane not theirs).
        self.held: Callable[[], bool] = lambda: True

    def hint(self, demand: bool = False) -> None:
        """Run a short cycle soon; `demand`: the hint only says more work arrived (a create), so
        it waits out the spacing after a cycle that moved nothing."""
        if self.held():
            LANE_HINTS.labels(lane=self.name, kind="demand" if demand else "news").inc()
        if not demand:
            self._news.set()
        self._hint.set()

    async def run_now(self, work: Callable[[], Awaitable[bool]]) -> bool | None:
        """Run `work` in this loop's place, at once: as one of its cycles would, never beside one
        (another lane carrying its sessions on into this one, `ScheduleCoordinator.carry_on`). None,
        without running it, while a cycle of this loop runs or the lane is another process's: the
        caller wakes the loop instead. Not counted as a cycle."""
        if self._lock.locked() or not self.held():
            return None
        async with self._lock:
            return await work()

    async def run(self, stop: asyncio.Event) -> None:
        await run_together(
            [(f"{self.name}.short", self._short(stop)), (f"{self.name}.long", self._long(stop))]
        )

    async def _short(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if not await _wait_any(self._hint, stop, None):
                continue
            # A hint to an idle lane runs at once; one within the debounce of the last cycle's
            # end waits out the rest of it, so a burst of hints is coalesced into one cycle.
            settle = self._debounce() - (time.monotonic() - self._ended)
            if settle > 0:
                await asyncio.sleep(settle)
            await self._wait_quiet(stop)
            urgent = self._news.is_set()
            self._hint.clear()
            self._news.clear()
            if await self._run_spaced("short", urgent):
                self._ended = time.monotonic()
            else:  # a long cycle ran meanwhile and spaced this one out: wait that out first
                self._hint.set()

    async def _long(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await _wait_any(stop, None, self._long_interval())
            await self._wait_quiet(stop)  # the safety net may wait one cycle's length
            if not stop.is_set():
                await self._run_spaced("long")

    async def _wait_quiet(self, stop: asyncio.Event) -> None:
        """Wait out the spacing, unless a hint that is not only demand arrives."""
        while not stop.is_set() and not self._news.is_set():
            quiet = self._quiet_until - time.monotonic()
            if quiet <= 0:
                return
            await _wait_any(self._news, stop, quiet)

    async def _run_spaced(self, kind: str, urgent: bool = False) -> bool:
        """One cycle; one that moved nothing, long or short, spaces the next one out (`SPACING`):
        a long cycle that found nothing is as fruitless as a short one. False: a
        short cycle was not run, as a long one spaced it out while it waited to run."""
        started = time.monotonic()
        moved = await self._run_once(kind, urgent)
        if moved is None:
            return False
        if not moved:
            self._quiet_until = time.monotonic() + SPACING * (time.monotonic() - started)
        return True

    async def _run_once(self, kind: str, urgent: bool = False) -> bool | None:
        """One cycle; True when it moved something, None when a short one hinted by demand only
        was spaced out while it waited for a long one to end."""
        async with self._lock:
            spaced = self._quiet_until > time.monotonic() and not (urgent or self._news.is_set())
            if kind == "short" and spaced:
                return None
            started = time.monotonic()
            try:
                moved = await (self._short_cycle() if kind == "short" else self._cycle())
            except Exception as exc:
                self._count_cycle(kind, "failed", started)
                self._failed(exc, kind)
                return False
            if moved or self.held():  # another process's lane: its loop here ran nothing
                self._count_cycle(kind, "moved" if moved else "fruitless", started)
            if self._away:
                self._away = False
                log.info("coordinator.services_back", coordinator=self.name)
        if moved:
            self._quiet_until = 0.0
            self.on_moved()
        return moved

    def _count_cycle(self, kind: str, outcome: str, started: float) -> None:
        CYCLE_SECONDS.labels(lane=self.name).observe(time.monotonic() - started)
        LANE_CYCLES.labels(lane=self.name, kind=kind, outcome=outcome).inc()

    def _failed(self, exc: Exception, kind: str) -> None:
        if not is_outage(exc):
            log.exception("coordinator.cycle_failed", coordinator=self.name, kind=kind)
        elif not self._away:
            log.warning("coordinator.service_unreachable", coordinator=self.name, error=describe(exc))
        self._away = self._away or is_outage(exc)


async def _wait_any(a: asyncio.Event, b: asyncio.Event | None, seconds: float | None) -> bool:
    """Wait until `a` or `b` is set or `seconds` pass; True when `a` is set."""
    waiters = [asyncio.ensure_future(a.wait())]
    if b is not None:
        waiters.append(asyncio.ensure_future(b.wait()))
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await w
    return a.is_set()
