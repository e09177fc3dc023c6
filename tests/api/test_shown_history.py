"""The session history read path: rows that moved nothing can be left out (`moves_only`), and
pages keep following on by row id either way."""

from __future__ import annotations

import uuid

from sqlalchemy import insert

from sokovan.db.models import SessionSchedulingHistory
from sokovan.manager.repositories import history_read
from tests.api.conftest import Api


async def _rows(api: Api, sid: uuid.UUID, moves: list[tuple[str | None, str]]) -> None:
    async with api.engine.begin() as conn:
        for i, (src, dst) in enumerate(moves):
            await conn.execute(
                insert(SessionSchedulingHistory).values(
                    session_id=sid,
                    handler=f"h{i}",
                    result="SUCCESS",
                    from_status=src,
                    to_status=dst,
                    attempt=1,
                )
            )


async def test_list_history_leaves_out_runs_that_moved_nothing_when_asked(api: Api) -> None:
    created = await (await api.create(api.alice, name="shown-h")).json()
    sid = uuid.UUID(created["id"])
    async with api.engine.connect() as conn:
        before, _ = await history_read.list_history(conn, sid, 500, None)
    await _rows(
        api,
        sid,
        [
            ("PENDING", "PENDING"),
            ("PENDING", "SCHEDULED"),
            ("SCHEDULED", "SCHEDULED"),
            ("SCHEDULED", "RUNNING"),
            ("RUNNING", "RUNNING"),
            (None, "RUNNING"),
        ],
    )
    async with api.engine.connect() as conn:
        every, _ = await history_read.list_history(conn, sid, 500, None)
        moves, _ = await history_read.list_history(conn, sid, 500, None, moves_only=True)
        first, cursor = await history_read.list_history(conn, sid, len(before) + 1, None, moves_only=True)
        assert cursor is not None
        rest, end = await history_read.list_history(conn, sid, 500, cursor, moves_only=True)
    assert len(every) == len(before) + 6
    added = [(h["from_status"], h["to_status"]) for h in moves[len(before) :]]
    assert added == [("PENDING", "SCHEDULED"), ("SCHEDULED", "RUNNING"), (None, "RUNNING")]
    assert first + rest == moves and end is None
