"""A kernel's service address (KernelRunning.service_addr) against real PostgreSQL: stored with the
guarded move to RUNNING, kept afterwards, never written by an event that does not move the kernel."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.events import KernelRunning, KernelTerminated, decode_event, encode_event, seal
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Kernel
from sokovan.state.kernel_events import KernelEventApplier, _coalesce, transition_for
from tests.orchestrator.db_seed import Seed, session_kernel

ADDR = "http://127.0.0.1:40001"


async def kernel_row(engine: AsyncEngine, sid: uuid.UUID) -> tuple[uuid.UUID, str, str | None]:
    return await session_kernel(engine, sid, Kernel.service_addr)


async def creating_kernel(seed: Seed) -> tuple[uuid.UUID, dict[str, str]]:
    sid = await seed.session(
        status=SessionStatus.CREATING, kernel_status=KernelStatus.CREATING, agent_id="a1"
    )
    kid, _, _ = await kernel_row(seed.engine, sid)
    return sid, {"agent_id": "a1", "kernel_id": str(kid), "session_id": str(sid)}


async def test_running_stores_the_address_and_later_events_keep_it(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    sid, ev = await creating_kernel(seed)
    applier = KernelEventApplier(engine)
    moved = await applier.apply_many([KernelRunning(**ev, pid=7, service_addr=ADDR)])
    assert [m.to_status for m in moved] == ["RUNNING"]
    assert (await kernel_row(engine, sid))[1:] == ("RUNNING", ADDR)

    # A repeated running (a reconcile, another address) moves nothing, so writes nothing.
    assert await applier.apply_many([KernelRunning(**ev, service_addr="http://elsewhere:1")]) == []
    await applier.apply_many([KernelTerminated(exit_code=0, reason="destroyed", **ev)])
    assert (await kernel_row(engine, sid))[1:] == ("TERMINATED", ADDR)


async def test_kernels_without_an_address_keep_null(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    plain, ev = await creating_kernel(seed)
    served, ev2 = await creating_kernel(seed)
    # One batch, one statement: a kernel with an address and one without.
    moved = await KernelEventApplier(engine).apply_many(
        [KernelRunning(**ev), KernelRunning(**ev2, service_addr=ADDR)]
    )
    assert len(moved) == 2
    assert (await kernel_row(engine, plain))[1:] == ("RUNNING", None)
    assert (await kernel_row(engine, served))[1:] == ("RUNNING", ADDR)


async def test_running_then_ended_in_one_batch_still_stores_the_address(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    sid, ev = await creating_kernel(seed)
    moved = await KernelEventApplier(engine).apply_many(
        [KernelRunning(**ev, service_addr=ADDR), KernelTerminated(exit_code=0, **ev)]
    )
    assert [m.to_status for m in moved] == ["TERMINATED"]  # the running step folded into the end
    assert (await kernel_row(engine, sid))[1:] == ("TERMINATED", ADDR)


async def test_an_address_from_another_agent_is_ignored(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    await seed.agent("a2")
    sid, ev = await creating_kernel(seed)
    stray = KernelRunning(**{**ev, "agent_id": "a2"}, service_addr=ADDR)
    assert await KernelEventApplier(engine).apply_many([stray]) == []
    assert (await kernel_row(engine, sid))[1:] == ("CREATING", None)


def test_transition_carries_only_an_address_that_fits() -> None:
    ids = {"agent_id": "a1", "kernel_id": str(uuid.uuid4()), "session_id": str(uuid.uuid4())}
    with_addr = transition_for(KernelRunning(**ids, service_addr=ADDR))
    assert with_addr is not None and with_addr.service_addr == ADDR
    too_long = transition_for(KernelRunning(**ids, service_addr="http://" + "h" * 300))
    assert too_long is not None and too_long.service_addr is None
    plain = transition_for(KernelRunning(**ids))
    assert plain is not None and plain.service_addr is None
    kept = _coalesce([t for t in (with_addr, transition_for(KernelTerminated(**ids))) if t is not None])
    assert [(t.to_status, t.service_addr) for t in kept] == [(KernelStatus.TERMINATED, ADDR)]


def test_running_events_of_older_agents_still_decode() -> None:
    new = KernelRunning(agent_id="a1", kernel_id="k", session_id="s", pid=3, service_addr=ADDR)
    assert decode_event(encode_event(new, "secret"), "secret") == new
    old_body = '{"at": "2026-01-01T00:00:00Z", "agent_id": "a1", "kernel_id": "k", "session_id": "s", '
    old_body += '"name": "kernel.running", "pid": 3}'
    old = decode_event(seal(old_body, "secret"), "secret")
    assert isinstance(old, KernelRunning) and (old.pid, old.service_addr) == (3, None)
