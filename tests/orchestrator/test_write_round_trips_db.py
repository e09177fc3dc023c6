"""A batch of session transitions against real PostgreSQL is a fixed number of statements,
whatever its size: a batch of hand-offs is one (`session_moves`); any other batch is three, the
sessions locked and read, their new state with its history, and their kernels moved with theirs.
What it leaves is what writing the transitions one after another would leave."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.common.types import KernelStatus, SchedulingResult, SessionResult, SessionStatus
from sokovan.db.models import Kernel, KernelSchedulingHistory, Session, SessionSchedulingHistory
from sokovan.state.session_writes import SessionTransition, apply_session_transitions
from tests.orchestrator.db_seed import Seed
from tests.support import statements_sent

S, K = SessionStatus, KernelStatus
T = TypeVar("T")


async def counted(engine: AsyncEngine, work: Callable[[AsyncConnection], Awaitable[T]]) -> tuple[T, int]:
    with statements_sent(engine) as statements:
        async with engine.begin() as conn:
            out = await work(conn)
    return out, len(statements)


def move(sid: uuid.UUID, src: SessionStatus, dst: SessionStatus, **kw: Any) -> SessionTransition:
    return SessionTransition(
        sid, frozenset({src}), dst, kw.pop("handler", "Test"), SchedulingResult.SUCCESS, **kw
    )


async def test_a_batch_of_moves_with_their_kernels_is_one_statement(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=64)
    sids = [
        await seed.session(status=S.SCHEDULED, kernel_status=K.SCHEDULED, agent_id="a1") for _ in range(30)
    ]
    before = dt.datetime.now(dt.UTC)
    batch = [
        move(s, S.SCHEDULED, S.PREPARING, kernel_to=K.PREPARING, status_info={"note": "n"}) for s in sids
    ]
    applied, statements = await counted(engine, lambda conn: apply_session_transitions(conn, batch))
    assert statements == 1
    assert sorted(applied.moved) == sorted(sids)
    async with engine.connect() as conn:
        sessions = (await conn.execute(select(Session).where(Session.id.in_(sids)))).all()
        kernels = (await conn.execute(select(Kernel).where(Kernel.session_id.in_(sids)))).all()
        history = (
            await conn.execute(
                select(SessionSchedulingHistory.session_id, SessionSchedulingHistory.to_status)
                .where(SessionSchedulingHistory.session_id.in_(sids))
                .order_by(SessionSchedulingHistory.id)
            )
        ).all()
        kernel_history = (
            await conn.execute(
                select(KernelSchedulingHistory.to_status, KernelSchedulingHistory.source).where(
                    KernelSchedulingHistory.session_id.in_(sids)
                )
            )
        ).all()
    assert {s.status for s in sessions} == {"PREPARING"}
    assert all(s.status_changed_at >= before and s.status_info["note"] == "n" for s in sessions)
    assert {k.status for k in kernels} == {"PREPARING"} and len(kernels) == 30
    # History rows are written in the batch's order.
    assert [(h.session_id, h.to_status) for h in history] == [(s, "PREPARING") for s in sids]
    assert sorted(kernel_history) == [("PREPARING", "session")] * 30


async def test_two_transitions_of_one_session_in_a_batch_chain(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    sid = await seed.session(status=S.RUNNING, kernel_status=K.RUNNING)
    batch = [
        move(sid, S.RUNNING, S.TERMINATING, status_info={"reason": "user"}, kernel_to=K.TERMINATING),
        SessionTransition(
            sid,
            frozenset({S.TERMINATING}),
            None,
            "Stay",
            SchedulingResult.NEED_RETRY,
            bump_attempts=True,
            message="again",
        ),
        move(sid, S.TERMINATING, S.TERMINATED, session_result=SessionResult.SUCCESS, kernel_to=K.TERMINATED),
    ]
    applied, _ = await counted(engine, lambda conn: apply_session_transitions(conn, batch))
    assert applied.moved == {sid: (S.RUNNING, S.TERMINATED)}
    async with engine.connect() as conn:
        row = (await conn.execute(select(Session).where(Session.id == sid))).one()
        kernel = (await conn.execute(select(Kernel).where(Kernel.session_id == sid))).one()
        history = (
            await conn.execute(
                select(
                    SessionSchedulingHistory.from_status,
                    SessionSchedulingHistory.to_status,
                    SessionSchedulingHistory.message,
                )
                .where(SessionSchedulingHistory.session_id == sid)
                .order_by(SessionSchedulingHistory.id)
            )
        ).all()
    assert (row.status, row.result, row.status_info.get("reason"), row.phase_attempts) == (
        "TERMINATED",
        "SUCCESS",
        "user",
        0,
    )
    assert row.terminated_at is not None and row.status_changed_at is not None
    assert kernel.status == "TERMINATED" and kernel.terminated_at is not None
    assert [tuple(h) for h in history][-3:] == [
        ("RUNNING", "TERMINATING", None),
        ("TERMINATING", "TERMINATING", "again"),
        ("TERMINATING", "TERMINATED", None),
    ]
