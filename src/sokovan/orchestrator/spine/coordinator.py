"""One coordinator for every kind of entity.

A coordinator runs lanes: ordered lists of handlers, each lane one cycle under its own
cluster-wide lock. For each handler it reads the rows in the handler's target statuses, lets the
handler work on them, has the entity's judgement turn what the handler reported into guarded
transitions (through the handler's StatusTransitions table), writes them with their history in
one transaction, counts them and publishes them to users. What differs per entity (its rows, its
statuses, its result kinds, its writes) is an `EntityKind`; the loop around it is `CoordinatorLoop`.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import structlog
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.bus.user_events import UserEvent, UserEventPublisher, publish
from sokovan.common.metrics import HANDLER_RUNS
from sokovan.db.engine import autocommit
from sokovan.orchestrator.locks import CycleLock, run_exclusive

log = structlog.get_logger(__name__)

RowT = TypeVar("RowT")
ChangeT = TypeVar("ChangeT")
ResultT = TypeVar("ResultT")
ResultT_co = TypeVar("ResultT_co", covariant=True)
ResultT_contra = TypeVar("ResultT_contra", contravariant=True)
RowT_contra = TypeVar("RowT_contra", contravariant=True)
HandlerT_contra = TypeVar("HandlerT_contra", contravariant=True)


class Handler(Protocol[RowT_contra, ResultT_co]):
    """Does the work of one stage for the rows in its target statuses and reports outcomes
    (a `HandlerResult`, or what the entity's kind judges instead)."""

    @property
    def name(self) -> str: ...

    @property
    def always_runs(self) -> bool:
        """Run even when no row is in the handler's statuses (e.g. to publish an empty table)."""

    async def execute(self, rows: Sequence[RowT_contra]) -> ResultT_co: ...


HandlerT = TypeVar("HandlerT", bound=Handler[Any, Any])


@dataclass
class Applied:
    """What one write did: the entities whose status changed (from → to, as values), the events
    users see, and whether anything else moved (e.g. a session's kernels)."""

    moved: dict[Any, tuple[str, str]] = field(default_factory=dict)  # entity id → (from, to)
    events: list[UserEvent] = field(default_factory=list)
    changed: bool = False
    # Other coordinators whose business the moves were (by hint name), woken after the write.
    wake: frozenset[str] = frozenset()
    # Each status change (from, to), where a move made more than one (else `moved` tells them).
    steps: list[tuple[str, str]] | None = None


class EntityKind(Protocol[HandlerT_contra, RowT, ChangeT, ResultT_contra]):
    """What a coordinator needs to know about one kind of entity."""

    @property
    def entity(self) -> str:
        """'session', 'deployment', 'route': for logs and metrics."""

    async def load(self, conn: AsyncConnection, handler: HandlerT_contra, now: dt.datetime) -> Sequence[RowT]:
        """The rows `handler` works on this cycle (its target statuses, and any it must expire)."""

    def judge(
        self, handler: HandlerT_contra, result: ResultT_contra, rows: Sequence[RowT], now: dt.datetime
    ) -> list[ChangeT]:
        """Turn what the handler reported into guarded transitions through its table."""

    def one_statement(self, changes: Sequence[ChangeT]) -> bool:
        """Whether `write` is one statement for `changes`: then it runs without a transaction around
        it (a statement is its own), which saves the BEGIN and COMMIT round trips."""

    async def write(self, conn: AsyncConnection, changes: Sequence[ChangeT]) -> Applied:
        """Apply the transitions (compare-and-set, history in the same transaction)."""

    def outcome(self, change: ChangeT) -> tuple[str, str]:
        """(handler name, result) of a transition, for the handler-runs counter."""

    def count_move(self, src: str, dst: str) -> None:
        """Count one status change of this entity."""


class Coordinator(Generic[HandlerT, RowT, ChangeT, ResultT]):
    def __init__(
        self,
        name: str,
        kind: EntityKind[HandlerT, RowT, ChangeT, ResultT],
        engine: AsyncEngine,
        lanes: Mapping[str, Sequence[HandlerT]],
        lock: CycleLock | None = None,
        events: UserEventPublisher | None = None,
    ) -> None:
        self.name = name
        self.kind = kind
        self.lanes: dict[str, list[HandlerT]] = {lane: list(hs) for lane, hs in lanes.items()}
        self._short_lanes: dict[str, list[HandlerT]] = {}  # what a hinted cycle runs, per lane
        self._engine = engine
        # Handlers' reads (and a lane's look) take no transaction: no BEGIN and ROLLBACK round trips.
        self._reads = autocommit(engine)
        self._lock = lock
        self._events = events
        # Wakes another coordinator (or one lane, `<coordinator>.<lane>`) by hint name; the
        # orchestrator sets it.
        self.on_wake: Callable[[str], None] = lambda name: None
        # The lanes whose work the statuses just entered are (hand-offs): woken at once after the
        # write, so a session moves on without waiting for another lane's next cycle.
        self.next_lanes: Callable[[frozenset[str]], frozenset[str]] = lambda statuses: frozenset()

    async def cycle(self) -> bool:
        """Run every lane once; True when anything moved."""
        moved = False
        for lane in self.lanes:
            moved |= await self.cycle_lane(lane)
        return moved

    async def cycle_lane(self, lane: str, short: bool = False) -> bool:
        """One cycle of `lane`; `short`: a hinted cycle, not the long one (see `for_short_cycle`)."""
        handlers = self.lanes[lane]
        if short:
            found = self._short_lanes.get(lane)
            if found is None:
                short_ones = (self.for_short_cycle(h) for h in handlers)
                found = self._short_lanes[lane] = [h for h in short_ones if h is not None]
            handlers = found

        async def run() -> bool:
            # A lane of one handler has nothing to skip but that handler, whose own read answers
            # the same question: the look would be one more round trip per cycle.
            present = await self.present(handlers) if len(handlers) > 1 else None
            # The statuses entities entered in this cycle: with `present`, every status an
            # earlier handler of the lane may have handed work on in.
            entered: set[str] = set()
            moved = False
            for handler in handlers:
                # A handler none of whose statuses any entity is in, or was moved into by an
                # earlier handler, has nothing to read: it is skipped without its query.
                wanted = self.statuses_of(handler)
                if present is None or wanted is None or wanted & (present | entered):
                    moved |= await self.run_handler(handler, entered)
            return moved

        return await run_exclusive(self._lock, f"{self.name}.{lane}", run)

    def wake_for(self, statuses: frozenset[str]) -> None:
        """Wake the lanes whose work entities that just entered `statuses` are."""
        for name in self.next_lanes(statuses):
            self.on_wake(name)

    def for_short_cycle(self, handler: HandlerT) -> HandlerT | None:
        """The handler a hinted cycle runs in `handler`'s place (by default `handler` itself; None:
        a hinted cycle leaves it to the long cycle)."""
        return handler

    async def present(self, handlers: Sequence[HandlerT]) -> frozenset[str] | None:
        """Which of the statuses `handlers` work on some entity is in now (None: unknown, run
        them all). One cheap read per cycle instead of one per handler in an idle lane."""
        return None

    def statuses_of(self, handler: HandlerT) -> frozenset[str] | None:
        """The statuses `handler` reads entities in (None: run it always)."""
        return None

    async def run_handler(
        self, handler: HandlerT, entered: set[str] | None = None, landed: dict[Any, str] | None = None
    ) -> bool:
        """Run one handler and write what it did; True when anything moved. The statuses
        entities entered are added to `entered`; with `landed`, see `apply`."""
        now = dt.datetime.now(dt.UTC)
        async with self._reads.connect() as conn:
            rows = await self.kind.load(conn, handler, now)
        if not rows and not handler.always_runs:
            return False
        result: ResultT = await handler.execute(rows)
        return await self.settle(handler, result, rows, now, entered, landed)

    async def settle(
        self,
        handler: HandlerT,
        result: ResultT,
        rows: Sequence[RowT],
        now: dt.datetime,
        entered: set[str] | None,
        landed: dict[Any, str] | None,
    ) -> bool:
        """Judge what the handler reported and write it (`apply`); True when anything moved."""
        return await self.apply(self.kind.judge(handler, result, rows, now), entered, landed)

    async def apply(
        self,
        changes: Sequence[ChangeT],
        entered: set[str] | None = None,
        landed: dict[Any, str] | None = None,
    ) -> bool:
        """Write `changes`, count them, wake the lanes their statuses are work for and publish them.
        With `landed`, the caller runs more handlers on the same entities at once: each moved
        entity's new status is recorded there instead of waking the next lanes, which the caller
        wakes for where the entities end up (`wake_for`)."""
        if not changes:
            return False
        writes = self._reads.connect() if self.kind.one_statement(changes) else self._engine.begin()
        async with writes as conn:
            applied = await self.kind.write(conn, changes)
        if entered is not None:
            entered.update(dst for _, dst in applied.moved.values())
        if landed is not None:
            landed.update((key, dst) for key, (_, dst) in applied.moved.items())
        for change in changes:
            handler, result = self.kind.outcome(change)
            HANDLER_RUNS.labels(handler=handler, result=result).inc()
        steps = applied.steps if applied.steps is not None else list(applied.moved.values())
        for src, dst in steps:
            self.kind.count_move(src, dst)
        # The next lanes first: the users' events need not hold up the hand-off.
        for name in applied.wake:
            self.on_wake(name)
        if landed is None:
            self.wake_for(frozenset(dst for _, dst in applied.moved.values()))
        await publish(self._events, applied.events)
        if applied.moved:
            moves = Counter(f"{src}->{dst}" for src, dst in steps)
            log.info(f"{self.kind.entity}s.moved", **dict(moves))
        return bool(applied.moved) or applied.changed
