"""Hand-offs without waiting for a tick: the lanes a status is work for, the promotions a kernel
event completes (applied as the events arrive), the lanes' cheap look before their reads, and the
share-out of lanes between a manager's workers."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.events import KernelRunning, KernelTerminated
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Kernel, Session, SessionSchedulingHistory
from sokovan.manager.daemon import worker_of
from sokovan.orchestrator.orchestrator import SokovanOrchestrator
from sokovan.orchestrator.schedule.event_promotions import promotions_for
from sokovan.orchestrator.schedule.handoffs import END, PLACE, PREPARE, START, next_lanes
from sokovan.state.kernel_events import KernelEventApplier
from sokovan.state.kernel_writes import KernelMove
from sokovan.state.session_reads import statuses_present
from tests.orchestrator.db_seed import Seed

S = SessionStatus


@pytest.mark.parametrize(
    ("entered", "woken"),
    [
        ({S.SCHEDULED}, {PREPARE}),
        ({S.PREPARED}, {START}),
        ({S.TERMINATING}, {END}),
        ({S.TERMINATED}, {PLACE, "retry"}),
        ({S.ERROR, S.CANCELLED}, {PLACE, "retry"}),
        ({S.PENDING}, {PLACE}),
        ({S.PREPARING, S.CREATING, S.RUNNING}, set()),  # agents' events move these on
        ({S.SCHEDULED, S.PREPARED}, {PREPARE, START}),
    ],
)
def test_a_status_wakes_the_lanes_it_is_work_for(entered: set[SessionStatus], woken: set[str]) -> None:
    assert next_lanes(frozenset(s.value for s in entered)) == woken


def _move(to: str, sid: uuid.UUID | None = None) -> KernelMove:
    return KernelMove(uuid.uuid4(), sid or uuid.uuid4(), "a1", "X", to, "owner")


def test_kernel_moves_pick_the_promotions_they_may_complete_in_lane_order() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    plan = promotions_for([_move("TERMINATED", a), _move("RUNNING", b), _move("ERROR", b), _move("PULLING")])
    assert [(spec.name, ids) for spec, ids in plan] == [
        ("DetectStartupFailure", [b]),
        ("PromoteToRunning", [b]),
        ("DetectTermination", [a, b]),
        ("PromoteToTerminated", [a, b]),
    ]
    assert promotions_for([_move("PULLING"), _move("CREATING")]) == []


async def _statuses(engine: AsyncEngine, sid: uuid.UUID) -> tuple[str, list[str]]:
    async with engine.connect() as conn:
        status = (await conn.execute(select(Session.status).where(Session.id == sid))).scalar_one()
        handlers = (
            await conn.execute(
                select(SessionSchedulingHistory.handler)
                .where(SessionSchedulingHistory.session_id == sid)
                .order_by(SessionSchedulingHistory.id)
            )
        ).scalars()
        return status, list(handlers)


async def _kernel_ids(engine: AsyncEngine, sid: uuid.UUID) -> list[uuid.UUID]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(Kernel.id).where(Kernel.session_id == sid).order_by(Kernel.cluster_idx)
        )
        return list(rows.scalars())


async def test_events_promote_their_session_at_once_and_only_when_every_kernel_got_there(
    engine: AsyncEngine,
) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    sid = await seed.session(status=S.CREATING, size=2, agent_id="a1")
    bystander = await seed.session(status=S.CREATING, agent_id="a1", kernel_status=KernelStatus.RUNNING)
    orchestrator = SokovanOrchestrator(engine, AgentRPCClient("x"), ClusterConfig())
    woken: list[str] = []
    orchestrator.schedule.on_wake = woken.append
    applier = KernelEventApplier(engine)
    first, second = await _kernel_ids(engine, sid)
    ev = {"agent_id": "a1", "session_id": str(sid)}

    await orchestrator.follow_kernels(await applier.apply_many([KernelRunning(kernel_id=str(first), **ev)]))
    assert (await _statuses(engine, sid))[0] == "CREATING"  # one kernel still starting

    await orchestrator.follow_kernels(await applier.apply_many([KernelRunning(kernel_id=str(second), **ev)]))
    assert await _statuses(engine, sid) == ("RUNNING", ["PromoteToRunning"])
    # Only the sessions the events touched are read: the other one waits for its lane.
    assert (await _statuses(engine, bystander))[0] == "CREATING"

    # A batch job's kernels end: RUNNING → TERMINATING → TERMINATED in the same breath, and
    # the lanes that pick up where it ended (placement: room freed; retries) are woken, not the
    # end lane for the TERMINATING it has already left.
    woken.clear()
    ended = [KernelTerminated(kernel_id=str(k), exit_code=0, **ev) for k in (first, second)]
    await orchestrator.follow_kernels(await applier.apply_many(ended))
    assert await _statuses(engine, sid) == (
        "TERMINATED",
        ["PromoteToRunning", "DetectTermination", "PromoteToTerminated"],
    )
    assert set(woken) == {PLACE, "retry"}


async def test_a_session_left_terminating_by_its_events_wakes_the_end_lane(engine: AsyncEngine) -> None:
    """One of two kernels ended: the session goes TERMINATING and stays there (its other kernel is
    the end lane's to destroy), so the end lane is woken."""
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    sid = await seed.session(status=S.RUNNING, size=2, agent_id="a1", kernel_status=KernelStatus.RUNNING)
    orchestrator = SokovanOrchestrator(engine, AgentRPCClient("x"), ClusterConfig())
    woken: list[str] = []
    orchestrator.schedule.on_wake = woken.append
    first, _ = await _kernel_ids(engine, sid)
    ended = KernelTerminated(kernel_id=str(first), exit_code=0, agent_id="a1", session_id=str(sid))
    await orchestrator.follow_kernels(await KernelEventApplier(engine).apply_many([ended]))
    assert (await _statuses(engine, sid))[0] == "TERMINATING"
    assert set(woken) == {END}


async def test_the_cheap_look_names_only_statuses_some_session_is_in(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.session(status=S.RUNNING, kernel_status=KernelStatus.RUNNING)
    async with engine.connect() as conn:
        present = await statuses_present(conn, ["RUNNING", "TERMINATING", "PENDING"])
    assert present == {"RUNNING"}


@pytest.mark.parametrize(
    ("value", "worker"),
    [("1/2", (1, 2)), ("0/2", (0, 2)), (None, (0, 1)), ("2/2", (0, 1)), ("x/2", (0, 1)), ("", (0, 1))],
)
def test_worker_of_reads_the_share_out_or_falls_back_to_one(
    value: str | None, worker: tuple[int, int]
) -> None:
    assert worker_of(value) == worker


async def test_workers_share_the_lanes_out_between_them(engine: AsyncEngine) -> None:
    workers = [
        SokovanOrchestrator(engine, AgentRPCClient("x"), ClusterConfig(), worker=(i, 2)) for i in range(2)
    ]
    names = [loop.name for loops in workers[0].loops.values() for loop in loops]
    mine = [{n for n in names if w._mine(n)} for w in workers]
    assert mine[0] and mine[1] and not mine[0] & mine[1] and mine[0] | mine[1] == set(names)
    # The four session lanes go two and two, so both cores carry sessions.
    session_lanes = {PLACE, PREPARE, START, END}
    assert len(mine[0] & session_lanes) == len(mine[1] & session_lanes) == 2
