"""A session's scheduling history against real PostgreSQL: a run that repeats itself (same
handler, outcome and statuses, the session staying where it is) is merged into the latest row;
every move is a row of its own, and a move never merges with what came before it."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import SchedulingResult, SessionStatus
from sokovan.db.models import SessionSchedulingHistory
from sokovan.state.session_writes import SessionTransition, apply_session_transitions
from tests.orchestrator.db_seed import Seed

S = SessionStatus


async def rows(engine: AsyncEngine, sid: uuid.UUID) -> list[tuple[str, str | None, str | None, int]]:
    h = SessionSchedulingHistory
    async with engine.connect() as conn:
        found = await conn.execute(
            select(h.handler, h.from_status, h.to_status, h.attempt).where(h.session_id == sid).order_by(h.id)
        )
        return [(r[0], r[1], r[2], r[3]) for r in found]


def stay(sid: uuid.UUID, attempt: int) -> SessionTransition:
    return SessionTransition(
        sid, frozenset({S.SCHEDULED}), None, "PrepareSessions", SchedulingResult.NEED_RETRY, attempt=attempt
    )


def move(sid: uuid.UUID, src: SessionStatus, dst: SessionStatus, handler: str) -> SessionTransition:
    return SessionTransition(sid, frozenset({src}), dst, handler, SchedulingResult.SUCCESS)


async def test_repeats_merge_and_moves_each_have_a_row(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    sid, other = await seed.session(status=S.SCHEDULED), await seed.session(status=S.SCHEDULED)
    for attempt in (1, 2, 3):
        async with engine.begin() as conn:  # `other` moves in the same batches: one statement path
            await apply_session_transitions(
                conn,
                [stay(sid, attempt)]
                + ([move(other, S.SCHEDULED, S.PREPARING, "PrepareSessions")] if attempt == 1 else []),
            )
    async with engine.begin() as conn:
        await apply_session_transitions(conn, [move(sid, S.SCHEDULED, S.PREPARING, "PrepareSessions")])
    async with engine.begin() as conn:
        await apply_session_transitions(
            conn,
            [
                move(sid, S.PREPARING, S.PREPARED, "PromoteToPrepared"),
                move(other, S.PREPARING, S.PREPARED, "PromoteToPrepared"),
            ],
        )

    assert await rows(engine, sid) == [
        ("PrepareSessions", "SCHEDULED", "SCHEDULED", 3),  # three runs, one row
        ("PrepareSessions", "SCHEDULED", "PREPARING", 0),
        ("PromoteToPrepared", "PREPARING", "PREPARED", 0),
    ]
    assert await rows(engine, other) == [
        ("PrepareSessions", "SCHEDULED", "PREPARING", 0),
        ("PromoteToPrepared", "PREPARING", "PREPARED", 0),
    ]
