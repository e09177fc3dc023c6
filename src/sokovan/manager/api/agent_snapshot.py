"""How a worker answers `GET /v2/agents`: read afresh while the fleet is calm, from a snapshot kept
fresh by the events the manager already publishes while it is busy, so that a poll under load
costs no statement however busy PostgreSQL is.

The first page a worker serves starts a follower: a listener of the user events that name an
agent (`kernel.status` with its agent, `agent.status`; one subscription per worker,
`UserEventHub`). It counts them, and keeps the rendered entries (`AgentPages`) close behind them:
the agents events named are read again (`agent_marks.marks_of`) at once after a calm, and under a
stream at most every `MIN_GAP_S` or `DUTY` times as long as the last such refresh took, so its own
work stays a small share of a busy worker.

- **Calm** (fewer than `BUSY_EVENTS` such events in the last one to two seconds): each page reads
  its own marks first (`AgentPages.read_page`, one statement), as consistent as reading the rows:
  a session seen RUNNING or ended is on the agents' page that comes after.
- **Busy**: pages are served from the entries, without I/O. The follower sweeps the whole fleet
  (`agent_marks.fleet_marks`, one statement) every `SWEEP_S` while busy and every `CALM_SWEEP_S`
  while calm, for what changes without an event (heartbeat fields, a new agent's first row, a
  write by hand) and as the safety net behind a lost message, so the entries are ready when a
  stream begins; a page is served from them only while the last sweep is recent enough. A
  page that comes after an agent's own state changed (an `agent.*` event, an operator action in
  this worker: `touch`) waits until the entries hold it. Occupancy then lags the events by at most
  the gap and one refresh: under such a stream, a page read a moment later differs anyway.

Without a listener (Redis away, the hub ended it) every page is read afresh. The follower stops once
no page was asked for `IDLE_S` (the entries are kept for the next one). An error of the hub or of a
read ends its live state until it has a listener again and a sweep succeeds (it retries with
backoff); meanwhile pages are read afresh and fail as any read would.
"""

from __future__ import annotations

import asyncio
import contextlib
import math

import structlog
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.user_event_hub import Listener, UserEventHub
from sokovan.bus.user_events import UserEvent
from sokovan.common.supervise import Backoff, describe
from sokovan.manager.api.agent_pages import AgentPages
from sokovan.manager.repositories.agent_marks import fleet_marks, marks_of
from sokovan.manager.repositories.agents_read import AgentFilter
from sokovan.manager.repositories.tenancy import Principal

log = structlog.get_logger(__name__)

BUSY_EVENTS = 200  # events naming agents in the current and the last whole second: busy
SWEEP_S = 1.0  # the whole fleet's marks read again at least this often while busy
CALM_SWEEP_S = 5.0  # ...and while calm
MIN_GAP_S = 0.25  # between two refreshes of what events named, under a stream of events
DUTY = 20.0  # ...and at least this many times as long as the last one took
IDLE_S = 30.0  # no page asked for this long: the follower stops


def _names_an_agent(event: UserEvent) -> bool:
    return event.agent_id is not None


class AgentSnapshot:
    """`page()` answers a `GET /v2/agents`; `touch()` after an action on an agent here; `close()`
    at the app's end."""

    def __init__(self, pages: AgentPages, reads: AsyncEngine, hub: UserEventHub) -> None:
        self.pages = pages
        self._reads = reads
        self._hub = hub
        self._lock = asyncio.Lock()  # one refresh at a time
        self._dirty: set[str] = set()  # agents named since the last refresh began
        self._changed = 0  # agent state changes seen (their events, actions here)
        self._covered = 0  # ...of which the last finished refresh holds
        self._second = 0  # the whole second of the loop's clock the count below is for
        self._this_second = 0  # events named agents in it
        self._last_second = 0  # ...and in the one before
        self._listener: Listener | None = None
        self._live = False  # a listener open and a sweep done since it was
        self._task: asyncio.Task[None] | None = None
        self._woken = asyncio.Event()
        self._asked = 0.0
        self._closed = False
        self._swept = -math.inf  # loop time the last sweep began
        self._last_end = -math.inf  # loop time the last refresh of named agents ended
        self._last_took = 0.0
        self._backoff = Backoff()  # after the hub or PostgreSQL failed the follower

    @property
    def live(self) -> bool:
        return self._live

    def busy(self) -> bool:
        """Whether pages are served from the entries now (see the module's doc)."""
        now = asyncio.get_running_loop().time()
        self._count(now, 0)
        fresh = now - self._swept <= SWEEP_S + CALM_SWEEP_S
        return self._live and fresh and self._this_second + self._last_second >= BUSY_EVENTS

    def touch(self, agent_id: str) -> None:
        """An agent's own state changed here: the next page waits until the entries hold it."""
        self._dirty.add(agent_id)
        self._changed += 1
        self._woken.set()

    async def page(
        self, request: web.Request, principal: Principal, flt: AgentFilter, limit: int, cursor: str | None
    ) -> web.Response:
        """One page (see the module's doc); a cursor this worker did not hand out raises ValueError,
        a read's error is raised as it is."""
        self._asked = asyncio.get_running_loop().time()
        if not self._closed and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._follow(), name="agent-snapshot")
        self._take_events()
        if not self.busy():
            async with self._lock, self._reads.connect() as conn:
                return await self.pages.read_page(conn, request, principal, flt, limit, cursor)
        if self._covered < self._changed:
            await self._refresh(whole=False, need=self._changed)
        return self.pages.page(request, principal, flt, limit, cursor)

    async def close(self) -> None:
        self._closed = True  # a cancel that `wait_for` swallows still ends the follower
        self._woken.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _count(self, now: float, events: int) -> None:
        second = int(now)
        if second != self._second:
            self._last_second = self._this_second if second == self._second + 1 else 0
            self._second, self._this_second = second, 0
        self._this_second += events

    def _gap_left(self, now: float) -> float:
        return self._last_end + max(MIN_GAP_S, DUTY * self._last_took) - now

    def _take_events(self) -> None:
        """The events the listener holds, into the dirty set; a listener the hub ended is dropped
        (events may have been missed: not live until a sweep after a new one)."""
        listener = self._listener
        if listener is None:
            return
        while self._listener is not None and not listener.queue.empty():
            self._note(listener.queue.get_nowait())

    def _note(self, event: UserEvent | None) -> None:
        if event is None:
            self._listener, self._live = None, False
            return
        assert event.agent_id is not None  # the listener's filter
        self._dirty.add(event.agent_id)
        self._count(asyncio.get_running_loop().time(), 1)
        if event.name.startswith("agent."):
            self._changed += 1

    async def _refresh(self, whole: bool, need: int | None = None) -> None:
        """A sweep of the fleet (`whole`) or a read of the agents named since the last refresh."""
        async with self._lock:
            if need is not None and self._covered >= need:
                return  # a refresh that ran meanwhile holds it
            loop = asyncio.get_running_loop()
            began, changed, named = loop.time(), self._changed, self._dirty
            self._dirty = set()
            try:
                async with self._reads.connect() as conn:
                    marks = await (fleet_marks(conn) if whole else marks_of(conn, named))
                    await self.pages.refresh(conn, marks, whole)
            except BaseException:
                self._dirty |= named  # still to be read
                raise
            self._covered = max(self._covered, changed)
            if whole:
                self._swept = began
            else:
                self._last_end, self._last_took = loop.time(), loop.time() - began

    def _wanted(self) -> bool:
        return not self._closed and asyncio.get_running_loop().time() - self._asked < IDLE_S

    async def _follow(self) -> None:
        try:
            while self._wanted():
                try:
                    await self._run()
                except Exception as exc:
                    log.warning("agent_snapshot.not_following", error=describe(exc))
                    self._live = False
                    await self._backoff.sleep()
        finally:
            self._live = False
            listener, self._listener = self._listener, None
            if listener is not None:
                await self._hub.close_listener(listener)

    async def _run(self) -> None:
        """Follow until no page is asked for `IDLE_S`; raises on an error of the hub or a read."""
        loop = asyncio.get_running_loop()
        if self._listener is None:
            self._listener = await self._hub.open(_names_an_agent)
        await self._refresh(whole=True)
        self._live = self._listener is not None  # the hub may have ended it meanwhile
        self._backoff.reset()
        while self._wanted():
            if self._listener is None:
                return  # the hub ended it: a new one, and a sweep
            self._take_events()
            now = loop.time()
            self._count(now, 0)
            streaming = self._this_second + self._last_second >= BUSY_EVENTS
            sweep_in = self._swept + (SWEEP_S if streaming else CALM_SWEEP_S) - now
            if sweep_in <= 0:
                await self._refresh(whole=True)
                continue
            gap = self._gap_left(now)
            if self._dirty and (gap <= 0 or self._covered < self._changed):
                await self._refresh(whole=False)
            else:  # events that come while one is held back join it (and leave the hub's queue)
                await self._wait(min(sweep_in, gap, SWEEP_S) if self._dirty else min(sweep_in, SWEEP_S))

    async def _wait(self, seconds: float) -> None:
        """Until `seconds` pass, an event reaches the listener, or an action here wakes the
        follower."""
        listener = self._listener
        assert listener is not None
        self._woken.clear()
        woken = asyncio.ensure_future(self._woken.wait())
        got = asyncio.ensure_future(listener.queue.get())
        try:
            await asyncio.wait((woken, got), timeout=max(seconds, 0.0), return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            got.cancel()
        if got.done() and not got.cancelled():
            self._note(got.result())
