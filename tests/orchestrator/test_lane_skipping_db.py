"""A lane skips the handlers that have nothing to read: none of their statuses is one some entity
was in when the cycle began (the lane's cheap look) or was moved into by an earlier handler of the
same cycle. A move elsewhere in the lane does not make every later handler read."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.orchestrator.spine.coordinator import Applied, Coordinator


@dataclass(frozen=True)
class Step:
    """A handler that works on entities in `source` and moves each of them to `to`."""

    name: str
    source: str
    to: str
    always_runs: bool = False

    async def execute(self, rows: Sequence[str]) -> list[str]:
        return list(rows)


class Table:
    """An entity kind kept in a dict (id → status): what the spine reads and writes."""

    entity = "thing"

    def __init__(self, statuses: dict[str, str]) -> None:
        self.statuses = statuses
        self.loads: list[str] = []
        self.at_once = False  # whether a write is one statement (`one_statement`)

    async def load(self, conn: AsyncConnection, handler: Step, now: dt.datetime) -> list[str]:
        self.loads.append(handler.name)
        return [k for k, v in self.statuses.items() if v == handler.source]

    def judge(
        self, handler: Step, result: list[str], rows: Sequence[str], now: dt.datetime
    ) -> list[tuple[str, str]]:
        return [(k, handler.to) for k in result]

    def one_statement(self, changes: Sequence[tuple[str, str]]) -> bool:
        return self.at_once

    async def write(self, conn: AsyncConnection, changes: Sequence[tuple[str, str]]) -> Applied:
        applied = Applied()
        for key, to in changes:
            applied.moved[key] = (self.statuses[key], to)
            self.statuses[key] = to
        return applied

    def outcome(self, change: tuple[str, str]) -> tuple[str, str]:
        return "step", "success"

    def count_move(self, src: str, dst: str) -> None:
        pass


class Lanes(Coordinator[Step, str, tuple[str, str], list[str]]):
    def statuses_of(self, handler: Step) -> frozenset[str] | None:
        return None if handler.always_runs else frozenset({handler.source})

    async def present(self, handlers: Sequence[Step]) -> frozenset[str] | None:
        assert isinstance(self.kind, Table)
        return frozenset(self.kind.statuses.values())


LANE = [
    Step("a_to_b", "A", "B"),
    Step("c_to_d", "C", "D"),
    Step("b_to_c", "B", "C"),
    Step("x_to_y", "X", "Y"),
]


async def cycle(engine: AsyncEngine, statuses: dict[str, str], lane: list[Step]) -> tuple[Table, bool]:
    table = Table(statuses)
    moved = await Lanes("things", table, engine, {"lane": lane}).cycle_lane("lane")
    return table, moved


async def test_a_status_entered_in_the_cycle_is_read_and_the_rest_are_skipped(engine: AsyncEngine) -> None:
    table, moved = await cycle(engine, {"1": "A", "2": "Z"}, LANE)
    assert moved
    # c_to_d comes before anything entered C; x_to_y's status nobody is in, though something moved.
    assert table.loads == ["a_to_b", "b_to_c"]
    assert table.statuses == {"1": "C", "2": "Z"}


async def test_a_lane_with_nothing_present_reads_only_what_always_runs(engine: AsyncEngine) -> None:
    lane = [*LANE, Step("always", "Q", "R", always_runs=True)]
    table, moved = await cycle(engine, {"1": "Z"}, lane)
    assert not moved
    assert table.loads == ["always"]


async def test_every_handler_whose_status_is_present_reads(engine: AsyncEngine) -> None:
    table, _ = await cycle(engine, {"1": "A", "2": "C", "3": "X"}, LANE)
    assert table.loads == ["a_to_b", "c_to_d", "b_to_c", "x_to_y"]
    assert table.statuses == {"1": "C", "2": "D", "3": "Y"}


async def test_a_lane_of_one_handler_reads_without_looking_first(engine: AsyncEngine) -> None:
    """Its handler's own read answers what the look would: the look is skipped, the read is not."""
    looks: list[int] = []

    class Counted(Lanes):
        async def present(self, handlers: Sequence[Step]) -> frozenset[str] | None:
            looks.append(len(handlers))
            return await super().present(handlers)

    table = Table({"1": "A", "2": "Z"})
    lanes = Counted("things", table, engine, {"one": [Step("a_to_b", "A", "B")], "two": LANE[:2]})
    assert await lanes.cycle_lane("one")
    assert looks == [] and table.loads == ["a_to_b"] and table.statuses == {"1": "B", "2": "Z"}
    assert not await lanes.cycle_lane("one")  # nothing left in A: the read finds nothing
    assert table.loads == ["a_to_b", "a_to_b"]
    await lanes.cycle_lane("two")
    assert looks == [2]
