"""A batch of hand-offs written in one statement (`session_moves`), against real PostgreSQL: it
leaves exactly what the general path (`apply_in_steps`) leaves, stale sessions included, and a
concurrent writer of the same sessions makes it stale rather than overwritten."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import KernelStatus, SchedulingResult, SessionResult, SessionStatus
from sokovan.db.engine import autocommit
from sokovan.db.models import Kernel, KernelSchedulingHistory, Session, SessionSchedulingHistory
from sokovan.state.session_moves import moves_only
from sokovan.state.session_writes import (
    AppliedTransitions,
    SessionTransition,
    apply_in_steps,
    apply_session_transitions,
)
from tests.orchestrator.db_seed import Seed
from tests.support import statements_sent

S, K = SessionStatus, KernelStatus


def move(
    sid: uuid.UUID, src: SessionStatus | set[SessionStatus], dst: SessionStatus, **kw: Any
) -> SessionTransition:
    expected = frozenset(src) if isinstance(src, set) else frozenset({src})
    return SessionTransition(sid, expected, dst, kw.pop("handler", "Test"), SchedulingResult.SUCCESS, **kw)


async def seed_set(seed: Seed) -> list[uuid.UUID]:
    """Sessions in the statuses the batch below moves them from (one of them already moved on)."""
    return [
        await seed.session(status=S.PENDING, status_info={"pending_reason": "no room", "keep": 1}),
        await seed.session(status=S.SCHEDULED, kernel_status=K.SCHEDULED, agent_id="a1", phase_attempts=3),
        await seed.session(status=S.RUNNING, kernel_status=K.RUNNING, agent_id="a1", status_info={"x": 1}),
        await seed.session(status=S.SCHEDULED, kernel_status=K.SCHEDULED, agent_id="a1"),
        await seed.session(status=S.RUNNING, kernel_status=K.RUNNING, agent_id="a1"),  # stale below
        await seed.session(status=S.PREPARED, kernel_status=K.PREPARED, agent_id="a1", size=2),
    ]


def batch(ids: list[uuid.UUID]) -> list[SessionTransition]:
    return [
        move(ids[0], S.PENDING, S.SCHEDULED, kernel_to=K.SCHEDULED, status_info={"placed": "a1"}),
        move(ids[1], S.SCHEDULED, S.PREPARING, kernel_to=K.PREPARING, message="pulling", attempt=2),
        move(
            ids[2],
            {S.RUNNING, S.TERMINATING},
            S.TERMINATED,
            kernel_to=K.TERMINATED,
            session_result=SessionResult.SUCCESS,
            drop_info=frozenset({"x"}),
        ),
        move(ids[3], S.SCHEDULED, S.PENDING, kernel_to=K.PENDING, status_info={"pending_reason": "again"}),
        move(ids[4], S.PREPARING, S.PREPARED, kernel_to=K.PREPARED),
        move(
            ids[5],
            {S.PREPARED, S.CREATING},
            S.RUNNING,
            kernel_to=K.RUNNING,
            kernel_expected=frozenset({K.PREPARED}),
        ),
    ]


async def state(engine: AsyncEngine, ids: list[uuid.UUID]) -> list[Any]:
    """What the writes left, per session in `ids` order, without ids or times."""
    out = []
    async with engine.connect() as conn:
        for sid in ids:
            s = (await conn.execute(select(Session).where(Session.id == sid))).one()
            kernels = (
                await conn.execute(
                    select(Kernel).where(Kernel.session_id == sid).order_by(Kernel.cluster_idx)
                )
            ).all()
            history = (
                await conn.execute(
                    select(
                        SessionSchedulingHistory.handler,
                        SessionSchedulingHistory.result,
                        SessionSchedulingHistory.from_status,
                        SessionSchedulingHistory.to_status,
                        SessionSchedulingHistory.message,
                        SessionSchedulingHistory.attempt,
                    )
                    .where(SessionSchedulingHistory.session_id == sid)
                    .order_by(SessionSchedulingHistory.id)
                )
            ).all()
            kernel_history = (
                await conn.execute(
                    select(KernelSchedulingHistory.source, KernelSchedulingHistory.to_status).where(
                        KernelSchedulingHistory.session_id == sid
                    )
                )
            ).all()
            out.append(
                (
                    (s.status, s.status_info, s.phase_attempts, s.result, s.terminated_at is not None),
                    [(k.status, k.agent_id, k.terminated_at is not None) for k in kernels],
                    [tuple(h) for h in history],
                    sorted(tuple(h) for h in kernel_history),
                )
            )
    return out


def summary(applied: AppliedTransitions, ids: list[uuid.UUID]) -> Any:
    index = {sid: i for i, sid in enumerate(ids)}
    return (
        sorted(index[s] for s in applied.applied),
        sorted(index[s] for s in applied.stale),
        sorted((index[s], m) for s, m in applied.moved.items()),
        sorted(index[s] for s in applied.owners),
    )


async def test_a_batch_of_hand_offs_leaves_what_the_general_path_leaves(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=64)
    one, other = await seed_set(seed), await seed_set(seed)
    assert moves_only(batch(one))
    with statements_sent(engine) as statements:
        async with autocommit(engine).connect() as conn:
            fast = await apply_session_transitions(conn, batch(one))
    # One statement for the batch; the stale session's history row (which may merge into its
    # latest: read it, then write) follows it.
    assert "klocked" in statements[0] and len(statements) == 3
    async with engine.begin() as conn:
        steps = await apply_in_steps(conn, batch(other))
    assert summary(fast, one) == summary(steps, other)
    assert summary(fast, one)[1] == [4]  # found RUNNING, expected PREPARING
    assert await state(engine, one) == await state(engine, other)
    # And again: every session is now where the batch found it stale, so each attempt is stale;
    # the stale session's second attempt merges into its first (attempt counted up).
    async with autocommit(engine).connect() as conn:
        again = await apply_session_transitions(conn, batch(one))
    async with engine.begin() as conn:
        again_steps = await apply_in_steps(conn, batch(other))
    assert summary(again, one) == summary(again_steps, other)
    assert await state(engine, one) == await state(engine, other)
    first = await state(engine, one)
    assert first[0][0][:3] == ("SCHEDULED", {"keep": 1, "placed": "a1"}, 0)  # the reason went with PENDING
    assert first[2][0] == ("TERMINATED", {}, 0, "SUCCESS", True) and first[2][1] == [
        ("TERMINATED", "a1", True)
    ]
    assert first[3][1] == [("PENDING", None, False)] and first[3][0][1] == {"pending_reason": "again"}
    assert first[5][1] == [("RUNNING", "a1", False)] * 2


async def test_a_concurrent_writer_makes_the_batch_stale_not_overwritten(engine: AsyncEngine) -> None:
    """The sessions are locked by another transaction when the statement runs: it waits, then
    reads them as that transaction left them, and finds them moved on."""
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=64)
    ids = [await seed.session(status=S.SCHEDULED, kernel_status=K.SCHEDULED, agent_id="a1") for _ in range(3)]
    hand_off = [move(sid, S.SCHEDULED, S.PREPARING, kernel_to=K.PREPARING, handler="First") for sid in ids]
    late = [move(sid, S.SCHEDULED, S.PREPARING, kernel_to=K.PREPARING, handler="Second") for sid in ids]
    async with engine.begin() as first:
        moved = await apply_session_transitions(first, hand_off)
        async with autocommit(engine).connect() as conn:
            second = asyncio.create_task(apply_session_transitions(conn, late))
            await asyncio.sleep(0.3)
            assert not second.done()  # waiting for the first transaction's locks
            await first.commit()
            out = await second
    assert sorted(moved.moved) == sorted(ids)
    assert out.moved == {} and sorted(out.stale) == sorted(ids)
    rows = await state(engine, ids)
    for s, kernels, history, kernel_history in rows:
        assert s[0] == "PREPARING" and kernels == [("PREPARING", "a1", False)]
        assert [h[0] for h in history] == ["First", "Second"]
        assert history[1][4].startswith("stale: expected") and history[1][4].endswith("found PREPARING")
        assert kernel_history == [("session", "PREPARING")]


def test_only_batches_of_moves_take_one_statement() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    assert moves_only([move(a, S.PENDING, S.SCHEDULED), move(b, S.RUNNING, S.TERMINATING)])
    # The same session twice, a stay, a status it may already be in, a requeue: the general path.
    assert not moves_only([move(a, S.PENDING, S.SCHEDULED), move(a, S.SCHEDULED, S.PREPARING)])
    assert not moves_only([SessionTransition(a, frozenset({S.PENDING}), None, "T", SchedulingResult.SKIPPED)])
    assert not moves_only([move(a, {S.PENDING, S.SCHEDULED}, S.SCHEDULED)])
    assert not moves_only([move(a, S.TERMINATING, S.PENDING, replace_kernels=True)])


async def test_a_concurrent_writer_that_leaves_an_expected_status_is_followed(engine: AsyncEngine) -> None:
    """The batch expects the sessions in either of two statuses; another transaction moves them
    from one to the other while the batch waits on their locks: the batch moves them from where
    that transaction left them (the case of an agent's event overtaking the lane's own write)."""
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=64)
    ids = [await seed.session(status=S.SCHEDULED, kernel_status=K.SCHEDULED, agent_id="a1") for _ in range(3)]
    lane = [move(sid, S.SCHEDULED, S.PREPARING, kernel_to=K.PREPARING, handler="Lane") for sid in ids]
    events = [
        move(
            sid,
            {S.SCHEDULED, S.PREPARING},
            S.PREPARED,
            kernel_to=K.PREPARED,
            kernel_expected=frozenset({K.PREPARING}),
            handler="Event",
        )
        for sid in ids
    ]
    async with engine.begin() as first:
        await apply_in_steps(first, lane)
        async with autocommit(engine).connect() as conn:
            second = asyncio.create_task(apply_session_transitions(conn, events))
            await asyncio.sleep(0.3)
            assert not second.done()
            await first.commit()
            out = await second
    assert out.stale == [] and out.moved == {sid: (S.PREPARING, S.PREPARED) for sid in ids}
    for s, kernels, history, _ in await state(engine, ids):
        assert s[0] == "PREPARED" and kernels == [("PREPARED", "a1", False)]
        assert [(h[0], h[2], h[3]) for h in history] == [
            ("Lane", "SCHEDULED", "PREPARING"),
            ("Event", "PREPARING", "PREPARED"),
        ]


async def test_a_two_step_move_writes_both_steps_or_nothing(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    moving = await seed.session(status=S.SCHEDULED, kernel_status=K.SCHEDULED, agent_id="a1", size=2)
    gone = await seed.session(status=S.TERMINATING, kernel_status=K.TERMINATING, agent_id="a1")

    def two_step(sid: uuid.UUID) -> SessionTransition:
        return move(
            sid,
            S.SCHEDULED,
            S.PREPARING,
            handler="PrepareSessions",
            then_to=S.PREPARED,
            then_handler="PromoteToPrepared",
            kernel_to=K.PREPARED,
            kernel_expected=frozenset({K.SCHEDULED, K.PREPARING, K.PULLING}),
        )

    changes = [two_step(moving), two_step(gone)]
    assert moves_only(changes)
    async with autocommit(engine).connect() as conn:
        applied = await apply_session_transitions(conn, changes)
    assert applied.moved == {moving: (S.SCHEDULED, S.PREPARED)} and applied.stale == [gone]
    assert applied.steps() == [(moving, S.SCHEDULED, S.PREPARING), (moving, S.PREPARING, S.PREPARED)]
    assert [(e.name, e.to_status) for e in applied.events()] == [
        ("session.status", "PREPARING"),
        ("session.status", "PREPARED"),
        ("kernel.status", "PREPARED"),
        ("kernel.status", "PREPARED"),
    ]
    async with engine.connect() as conn:
        history = (
            await conn.execute(
                select(
                    SessionSchedulingHistory.session_id,
                    SessionSchedulingHistory.handler,
                    SessionSchedulingHistory.from_status,
                    SessionSchedulingHistory.to_status,
                ).order_by(SessionSchedulingHistory.id)
            )
        ).all()
        kernels = (await conn.execute(select(Kernel.session_id, Kernel.status))).all()
        sources = (await conn.execute(select(KernelSchedulingHistory.source))).scalars().all()
    assert [tuple(h) for h in history] == [
        (moving, "PrepareSessions", "SCHEDULED", "PREPARING"),
        (moving, "PromoteToPrepared", "PREPARING", "PREPARED"),
        (gone, "PrepareSessions", "TERMINATING", "TERMINATING"),  # stale: nothing moved
    ]
    assert sorted(kernels) == sorted([(moving, "PREPARED"), (moving, "PREPARED"), (gone, "TERMINATING")])
    assert sources == ["agent:answer", "agent:answer"]
    # Only the one-statement path writes two steps.
    async with engine.begin() as conn:
        with pytest.raises(ValueError, match="two-step"):
            await apply_in_steps(conn, [two_step(moving)])
