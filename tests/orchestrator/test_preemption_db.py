"""Preemption against real PostgreSQL (CONTRACT section 9): eviction with history and nomination in
the placement lane's transaction, the reservation of the freed room, lapse, the `terminate` ending
and its retry child, the `requeue` path back to PENDING, and the cases that never preempt."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.user_events import UserEvent
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import (
    Kernel,
    Keypair,
    KeypairResourcePolicy,
    ScalingGroup,
    Session,
    SessionDependency,
    SessionSchedulingHistory,
)
from sokovan.orchestrator.retry.engine import RetryCoordinator
from sokovan.orchestrator.schedule.coordinator import ScheduleCoordinator
from sokovan.orchestrator.schedule.handlers.lifecycle.requeue_preempted import RequeuePreempted
from sokovan.orchestrator.schedule.handlers.lifecycle.schedule_new_sessions import ScheduleNewSessions
from sokovan.orchestrator.schedule.handlers.promotion.promote_sessions import PromoteSessions
from sokovan.orchestrator.schedule.handlers.promotion.promotions import PROMOTE_TO_TERMINATED
from tests.orchestrator.db_seed import Seed, read_column, read_one

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Collect:
    """A UserEventPublisher that keeps what it is given."""

    def __init__(self) -> None:
        self.events: list[UserEvent] = []

    async def publish_many(self, events: Sequence[UserEvent]) -> None:
        self.events.extend(events)


async def full_agent(
    engine: AsyncEngine, mode: str = "terminate", **victim: Any
) -> tuple[Seed, list[uuid.UUID]]:
    """Agent a1 (cpu=4) full with four cpu=1 priority-5 preemptible batch sessions, oldest first."""
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=4)
    async with engine.begin() as conn:
        await conn.execute(update(ScalingGroup).values(preemption={"mode": mode, "grace_period": 30}))
    victims = [
        await seed.session(
            status=SessionStatus.RUNNING,
            agent_id="a1",
            priority=5,
            preemptible=True,
            created_at=T0 + dt.timedelta(minutes=i),
            **victim,
        )
        for i in range(4)
    ]
    return seed, victims


async def place(engine: AsyncEngine, events: Collect | None = None) -> None:
    handler = ScheduleNewSessions(engine, events=events)  # type: ignore[arg-type]
    await ScheduleCoordinator(engine, ClusterConfig(), [handler]).cycle()


async def info(engine: AsyncEngine, sid: uuid.UUID) -> tuple[str, dict[str, Any]]:
    row = await read_one(engine, select(Session.status, Session.status_info).where(Session.id == sid))
    return row.status, row.status_info


async def statuses(engine: AsyncEngine, ids: list[uuid.UUID]) -> list[str]:
    return [(await info(engine, sid))[0] for sid in ids]


async def end_kernels(engine: AsyncEngine, ids: list[uuid.UUID]) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            update(Kernel).where(Kernel.session_id.in_(ids)).values(status=KernelStatus.TERMINATED.value)
        )


async def test_eviction_writes_victims_history_and_nomination(engine: AsyncEngine) -> None:
    seed, victims = await full_agent(engine)
    urgent = await seed.session(cpu=2, priority=50)
    events = Collect()
    await place(engine, events)
    # exactly the two newest
    assert await statuses(engine, victims) == ["RUNNING", "RUNNING", "TERMINATING", "TERMINATING"]
    for victim in victims[2:]:
        _, vi = await info(engine, victim)
        assert vi == {
            "cause": "PREEMPTED",
            "message": f"preempted by session {urgent} (priority 50)",
            "preempted_by": str(urgent),
            "preempt_mode": "terminate",
            "kill_grace": 30.0,
        }
        history = await read_one(
            engine,
            select(
                SessionSchedulingHistory.handler,
                SessionSchedulingHistory.from_status,
                SessionSchedulingHistory.to_status,
            ).where(SessionSchedulingHistory.session_id == victim),
        )
        assert tuple(history) == ("ScheduleNewSessions", "RUNNING", "TERMINATING")
        # the kernels are TerminateSessions' to stop (with the kill grace)
        assert await read_column(engine, select(Kernel.status).where(Kernel.session_id == victim)) == [
            "RUNNING"
        ]
    status, ui = await info(engine, urgent)
    assert status == "PENDING"
    assert ui["nominated_agents"] == ["a1"]
    assert sorted(ui["preempts"]) == sorted(str(v) for v in victims[2:])
    until = dt.datetime.fromisoformat(ui["nominated_until"])
    assert dt.timedelta(seconds=80) < until - dt.datetime.now(dt.UTC) <= dt.timedelta(seconds=90)
    assert ui["pending_reason"] == (
        f"waiting for preempted sessions {victims[3]}, {victims[2]} to end on agent a1"
    )
    preempted = [e for e in events.events if e.name == "session.preempted"]
    assert sorted((e.session_id, e.preempted_by, e.agent_id) for e in preempted) == sorted(
        (str(v), str(urgent), "a1") for v in victims[2:]
    )
    # a second cycle changes nothing: the nominee waits, no one is preempted twice
    await place(engine)
    assert await statuses(engine, victims) == ["RUNNING", "RUNNING", "TERMINATING", "TERMINATING"]
    assert (await info(engine, urgent))[1]["preempts"] == ui["preempts"]


async def test_reservation_holds_the_freed_room_for_the_nominee(engine: AsyncEngine) -> None:
    seed, victims = await full_agent(engine)
    urgent = await seed.session(cpu=2, priority=50)
    await place(engine)
    low = await seed.session(cpu=1, priority=5)  # created after the victims were chosen
    await end_kernels(engine, [victims[3]])  # one victim ended: cpu=1 free, the nominee needs 2
    await place(engine)
    status, li = await info(engine, low)
    assert status == "PENDING"
    assert li["pending_reason"].startswith("0/1 agents fit: 1 room held for a preempting session")
    assert (await info(engine, urgent))[0] == "PENDING"
    await end_kernels(engine, [victims[2]])  # both ended: the nominee takes its room, low still waits
    await place(engine)
    assert (await info(engine, urgent))[0] == "SCHEDULED"
    assert await read_column(engine, select(Kernel.agent_id).where(Kernel.session_id == urgent)) == ["a1"]
    _, ui = await info(engine, urgent)
    assert not {"nominated_agents", "nominated_until", "preempts", "pending_reason"} & set(ui)
    assert (await info(engine, low))[0] == "PENDING"


async def test_held_room_refuses_equal_priority_and_admits_higher(engine: AsyncEngine) -> None:
    seed, victims = await full_agent(engine)
    await seed.session(cpu=2, priority=50)
    await place(engine)
    await end_kernels(engine, [victims[3]])  # cpu=1 free, held for the nominee
    async with engine.begin() as conn:  # nothing else to preempt
        await conn.execute(update(Session).where(Session.id.in_(victims[:2])).values(preemptible=False))
    equal = await seed.session(cpu=1, priority=50)
    await place(engine)
    status, ei = await info(engine, equal)
    assert status == "PENDING"
    assert ei["pending_reason"].startswith("0/1 agents fit: 1 room held for a preempting session")
    higher = await seed.session(cpu=1, priority=60)
    await place(engine)
    assert (await info(engine, higher))[0] == "SCHEDULED"
    assert (await info(engine, equal))[0] == "PENDING"


async def test_a_lapsed_nomination_is_cleared_and_the_session_competes_again(engine: AsyncEngine) -> None:
    seed, victims = await full_agent(engine)
    urgent = await seed.session(cpu=2, priority=50)
    await place(engine)
    _, ui = await info(engine, urgent)
    # The victims never ended; the nomination ran out.
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)).isoformat()
    async with engine.begin() as conn:
        await conn.execute(
            update(Session).where(Session.id == urgent).values(status_info={**ui, "nominated_until": past})
        )
    await place(engine)
    status, ui = await info(engine, urgent)
    assert status == "PENDING"
    # it competed again and preempted the two sessions still running
    assert sorted(ui["preempts"]) == sorted(str(v) for v in victims[:2])
    assert await statuses(engine, victims) == ["TERMINATING"] * 4
    # and with nothing left to preempt, a lapse clears the nomination
    async with engine.begin() as conn:
        await conn.execute(
            update(Session).where(Session.id == urgent).values(status_info={**ui, "nominated_until": past})
        )
    await place(engine)
    status, ui = await info(engine, urgent)
    assert not {"nominated_agents", "nominated_until", "preempts"} & set(ui)
    assert ui["pending_reason"].endswith("no lower-priority preemptible sessions would free enough room")
    messages = await read_column(
        engine, select(SessionSchedulingHistory.message).where(SessionSchedulingHistory.session_id == urgent)
    )
    assert any(m and m.startswith("nomination lapsed") for m in messages)


async def test_terminate_ends_terminated_without_result_and_gets_a_retry_child(engine: AsyncEngine) -> None:
    policy = {"max_retries": 1, "retry_delay": 0.05, "jitter": "none"}
    seed, victims = await full_agent(engine, retry_policy=policy)
    urgent = await seed.session(cpu=1, priority=50)
    await place(engine)
    victim = victims[3]
    assert (await info(engine, victim))[0] == "TERMINATING"
    await end_kernels(engine, [victim])
    await ScheduleCoordinator(engine, ClusterConfig(), [PromoteSessions(PROMOTE_TO_TERMINATED)]).cycle()
    row = await read_one(engine, select(Session.status, Session.result).where(Session.id == victim))
    assert (row.status, row.result) == ("TERMINATED", None)
    retry = RetryCoordinator(engine, ClusterConfig())
    assert await retry.decide() == 1
    await asyncio.sleep(0.1)
    await retry.dispatch()
    child = await read_one(
        engine,
        select(Session.status, Session.retry_cause, Session.priority, Session.preemptible).where(
            Session.parent_session_id == victim
        ),
    )
    assert tuple(child) == ("PENDING", "PREEMPTED", 5, True)
    assert urgent


async def test_a_user_cancelled_session_is_still_never_retried(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    sid = await seed.session(
        status=SessionStatus.TERMINATED,
        kernel_status=KernelStatus.TERMINATED,
        status_info={"cause": "USER_CANCELLED"},
        retry_policy={"max_retries": 1, "retry_delay": 0.05},
    )
    assert await RetryCoordinator(engine, ClusterConfig()).decide() == 0
    assert await read_column(engine, select(Session.id).where(Session.parent_session_id == sid)) == []


async def test_requeue_returns_the_same_session_to_pending_with_new_kernels(engine: AsyncEngine) -> None:
    seed, victims = await full_agent(
        engine, mode="requeue", retry_policy={"max_retries": 1, "retry_delay": 0}
    )
    await seed.session(cpu=1, priority=50)
    await place(engine)
    victim = victims[3]
    _, vi = await info(engine, victim)
    assert vi["preempt_mode"] == "requeue"
    old = await read_column(engine, select(Kernel.id).where(Kernel.session_id == victim))
    end = [RequeuePreempted(), PromoteSessions(PROMOTE_TO_TERMINATED)]
    await ScheduleCoordinator(engine, ClusterConfig(), end).cycle()
    assert (await info(engine, victim))[0] == "TERMINATING"  # its kernels have not ended yet
    await end_kernels(engine, [victim])
    await ScheduleCoordinator(engine, ClusterConfig(), end).cycle()
    status, vi = await info(engine, victim)
    assert status == "PENDING"  # not ended by PromoteToTerminated
    assert vi["preempted_count"] == 1
    assert not {"cause", "message", "preempted_by", "preempt_mode", "kill_grace"} & set(vi)
    kernels = await read_one(
        engine, select(Kernel.id, Kernel.status, Kernel.agent_id).where(Kernel.session_id == victim)
    )
    assert kernels.id not in old and (kernels.status, kernels.agent_id) == ("PENDING", None)
    history = await read_one(
        engine,
        select(SessionSchedulingHistory.handler, SessionSchedulingHistory.message).where(
            SessionSchedulingHistory.session_id == victim, SessionSchedulingHistory.to_status == "PENDING"
        ),
    )
    assert history.handler == "RequeuePreempted"
    assert all(str(k) in history.message for k in old)
    row = await read_one(engine, select(Session.priority, Session.result).where(Session.id == victim))
    assert tuple(row) == (5, None)
    # no retry child: it never ended (its policy would allow one)
    assert await RetryCoordinator(engine, ClusterConfig()).decide() == 0
    assert await read_column(engine, select(Session.id).where(Session.parent_session_id == victim)) == []


@pytest.mark.parametrize("why", ["mode off", "over quota", "dependency", "equal priority", "not preemptible"])
async def test_never(engine: AsyncEngine, why: str) -> None:
    seed, victims = await full_agent(engine, mode="off" if why == "mode off" else "terminate")
    if why == "over quota":
        async with engine.begin() as conn:
            await conn.execute(
                insert(KeypairResourcePolicy).values(name="p", total_resource_slots={"cpu": "5"})
            )
            await conn.execute(update(Keypair).where(Keypair.access_key == "AK1").values(resource_policy="p"))
    if why == "not preemptible":
        async with engine.begin() as conn:
            await conn.execute(update(Session).values(preemptible=False))
    urgent = await seed.session(cpu=2, priority=5 if why == "equal priority" else 50)
    if why == "dependency":
        async with engine.begin() as conn:
            await conn.execute(insert(SessionDependency).values(session_id=urgent, depends_on=victims[0]))
    await place(engine)
    assert await statuses(engine, victims) == ["RUNNING"] * 4
    status, ui = await info(engine, urgent)
    assert status == "PENDING" and "nominated_agents" not in ui
    reason = ui["pending_reason"]
    if why == "mode off":
        assert reason == "0/1 agents fit: 1 insufficient cpu"
    elif why == "over quota":
        assert reason.startswith("quota exceeded")
    elif why == "dependency":
        assert reason.startswith("waiting for dependencies")
    else:
        assert reason.endswith("no lower-priority preemptible sessions would free enough room")


async def test_a_victim_that_moved_on_abandons_the_whole_decision(engine: AsyncEngine) -> None:
    """No partial preemption: the guarded write of every victim succeeds, or none is written."""
    from sokovan.common.preemption import PreemptionMode, PreemptionSettings
    from sokovan.orchestrator.provisioner.snapshot import Preemption
    from sokovan.orchestrator.schedule.evictions import evict

    seed, victims = await full_agent(engine)
    urgent = await seed.session(cpu=2, priority=50)
    async with engine.begin() as conn:
        await conn.execute(update(Session).where(Session.id == victims[3]).values(status="TERMINATING"))
    decision = Preemption(urgent, 50, (victims[2], victims[3]), ("a1",))
    async with engine.begin() as conn:
        applied = await evict(
            conn, decision, PreemptionSettings(mode=PreemptionMode.TERMINATE), dt.datetime.now(dt.UTC), "t"
        )
    assert applied is None
    assert await statuses(engine, victims) == ["RUNNING", "RUNNING", "RUNNING", "TERMINATING"]
    assert "nominated_agents" not in (await info(engine, urgent))[1]
