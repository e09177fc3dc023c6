"""Entities judged by outcome alone: deployments (SUCCESS / FAILURE) and routes (also STALE).

Unlike sessions, these have no tries or timeouts for the coordinator to judge: a handler's outcome
goes straight through its `OutcomeTransitions` table. An outcome whose entry is None keeps the
status (a SUCCESS that changes nothing writes nothing; a FAILURE or STALE is kept in the history).
`OutcomeKind` is the spine's `EntityKind` for both; what differs between them (how rows are read,
which tables they live in, the event users see) is given to it.
"""

from __future__ import annotations

import abc
import datetime as dt
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from prometheus_client import Counter
from sqlalchemy import distinct, select
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.bus.user_events import UserEvent
from sokovan.common.types import HandlerOutcome
from sokovan.orchestrator.spine.coordinator import Applied
from sokovan.orchestrator.spine.result import HandlerResult
from sokovan.state.entity_writes import EntityTable, EntityTransition, apply_entity_transitions

StatusT = TypeVar("StatusT", bound=str)
Info = dict[str, Any]
OutcomeResult = HandlerResult[Info]


@dataclass(frozen=True)
class OutcomeTransitions(Generic[StatusT]):
    """Where each outcome takes the entity; None keeps its status."""

    success: StatusT | None = None
    failure: StatusT | None = None
    stale: StatusT | None = None


class Row(Protocol):
    @property
    def id(self) -> uuid.UUID: ...

    @property
    def status(self) -> str: ...


RowT = TypeVar("RowT", bound=Row)


class OutcomeHandler(abc.ABC, Generic[RowT, StatusT]):
    """A deployment or route handler: targets, table, and the work. `name` is the class name.
    `reads` are the statuses whose rows it is given (its targets unless it says otherwise);
    `always_runs` runs it even when no row is in them (e.g. to publish an empty routing table)."""

    name: str
    targets: frozenset[StatusT]
    reads: frozenset[StatusT] | None = None
    transitions: OutcomeTransitions[StatusT]
    always_runs: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__

    @abc.abstractmethod
    async def execute(self, rows: Sequence[RowT]) -> OutcomeResult: ...


@dataclass(frozen=True)
class OutcomeChange(Generic[RowT]):
    """A guarded transition and the row it was decided on (for the event users see)."""

    transition: EntityTransition
    row: RowT


class OutcomeKind(Generic[RowT, StatusT]):
    def __init__(
        self,
        entity: str,
        table: EntityTable,
        fetch: Callable[[AsyncConnection, frozenset[StatusT]], Awaitable[Sequence[RowT]]],
        event: Callable[[RowT, str, str], UserEvent],
        transitions_counter: Counter,
    ) -> None:
        self.entity = entity
        self._table = table
        self._fetch = fetch
        self._event = event
        self._counter = transitions_counter

    async def load(
        self, conn: AsyncConnection, handler: OutcomeHandler[RowT, StatusT], now: dt.datetime
    ) -> Sequence[RowT]:
        return await self._fetch(conn, handler.reads if handler.reads is not None else handler.targets)

    async def present(self, conn: AsyncConnection, statuses: Sequence[str]) -> frozenset[str]:
        """Which of `statuses` some entity is in now."""
        status = self._table.model.status
        rows = await conn.execute(select(distinct(status)).where(status.in_(statuses)))
        return frozenset(rows.scalars())

    def judge(
        self,
        handler: OutcomeHandler[RowT, StatusT],
        result: OutcomeResult,
        rows: Sequence[RowT],
        now: dt.datetime,
    ) -> list[OutcomeChange[RowT]]:
        table = handler.transitions
        by_id = {r.id: r for r in rows}
        out: list[OutcomeChange[RowT]] = []

        def add(eid: uuid.UUID, outcome: HandlerOutcome, to: StatusT | None, message: str | None) -> None:
            row = by_id.get(eid)
            if row is None or row.status not in handler.targets:
                return  # only rows in the handler's targets move
            if (
                (to is None or to == row.status)
                and outcome is HandlerOutcome.SUCCESS
                and eid not in result.info
            ):
                return  # nothing changes: no write
            transition = EntityTransition(
                entity_id=eid,
                expected=frozenset(handler.targets),
                to_status=to,
                handler=handler.name,
                result=outcome.value,
                message=message,
                status_info=result.info.get(eid),
            )
            out.append(OutcomeChange(transition, row))

        for eid in result.successes:
            add(eid, HandlerOutcome.SUCCESS, table.success, None)
        for eid, message in result.failures.items():
            add(eid, HandlerOutcome.FAILURE, table.failure, message)
        for eid, message in result.stale.items():
            if table.stale is not None and by_id.get(eid) is not None and by_id[eid].status == table.stale:
                continue  # already where staleness puts it
            add(eid, HandlerOutcome.STALE, table.stale, message)
        return out

    def one_statement(self, changes: Sequence[OutcomeChange[RowT]]) -> bool:
        return False

    async def write(self, conn: AsyncConnection, changes: Sequence[OutcomeChange[RowT]]) -> Applied:
        applied = await apply_entity_transitions(conn, self._table, [c.transition for c in changes])
        rows = {c.row.id: c.row for c in changes}
        events = [self._event(rows[eid], src, dst) for eid, (src, dst) in applied.moved.items()]
        return Applied(moved=applied.moved, events=events, changed=False)

    def outcome(self, change: OutcomeChange[RowT]) -> tuple[str, str]:
        return change.transition.handler, change.transition.result

    def count_move(self, src: str, dst: str) -> None:
        self._counter.labels(from_status=src, to_status=dst).inc()
