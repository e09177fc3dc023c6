"""A session that stays PENDING for a new reason is announced (`session.pending_reason`), so a
page that lists sessions shows why each waits without polling; the same reason twice is not."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import SchedulingResult, SessionStatus
from sokovan.state.session_writes import SessionTransition, apply_session_transitions
from tests.orchestrator.db_seed import Seed


def waits(sid: uuid.UUID, reason: str) -> SessionTransition:
    return SessionTransition(
        session_id=sid,
        expected=frozenset({SessionStatus.PENDING}),
        to_status=None,
        handler="ScheduleNewSessions",
        result=SchedulingResult.SKIPPED,
        status_info={"pending_reason": reason},
    )


async def test_a_new_reason_is_an_event_and_a_repeated_one_is_not(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    sid = await seed.session(cpu=64)
    async with engine.begin() as conn:
        first = await apply_session_transitions(conn, [waits(sid, "0/2 agents fit: 2 insufficient cpu")])
    [event] = first.events()
    assert (event.name, event.session_id, event.owner) == (
        "session.pending_reason",
        str(sid),
        str(seed.user_id),
    )
    assert event.detail == {"pending_reason": "0/2 agents fit: 2 insufficient cpu"}
    async with engine.begin() as conn:
        again = await apply_session_transitions(conn, [waits(sid, "0/2 agents fit: 2 insufficient cpu")])
    assert again.events() == []
    async with engine.begin() as conn:
        other = await apply_session_transitions(conn, [waits(sid, "0/2 agents fit: 2 not READY (DRAINED)")])
    assert [e.detail for e in other.events()] == [{"pending_reason": "0/2 agents fit: 2 not READY (DRAINED)"}]


async def test_a_session_that_moves_is_one_status_event_not_two(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    sid = await seed.session()
    move = SessionTransition(
        session_id=sid,
        expected=frozenset({SessionStatus.PENDING}),
        to_status=SessionStatus.CANCELLED,
        handler="test",
        result=SchedulingResult.SUCCESS,
        status_info={"pending_reason": "gone"},
    )
    async with engine.begin() as conn:
        applied = await apply_session_transitions(conn, [move])
    assert [e.name for e in applied.events()] == ["session.status"]
