"""The image a kernel runs (KernelRunning.image, .image_digest) against real PostgreSQL: stored with
the guarded move to RUNNING, kept afterwards, never failing a batch when too long; and the pure
rules around it (what a transition carries, what a folded step hands on, what is not bare)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.events import (
    KernelPrepared,
    KernelPulling,
    KernelRunning,
    KernelTerminated,
    decode_event,
    encode_event,
)
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Kernel
from sokovan.orchestrator.schedule.answered_moves import _bare
from sokovan.state.kernel_events import KernelEventApplier, _coalesce, transition_for
from tests.orchestrator.db_seed import Seed

REF = "127.0.0.1:5000/python:3"
DIGEST = "sha256:" + "ab" * 32


async def kernel_image(engine: AsyncEngine, sid: uuid.UUID) -> tuple[str, str | None, str | None]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(Kernel.status, Kernel.image_ref, Kernel.image_digest).where(Kernel.session_id == sid)
            )
        ).one()
    return row[0], row[1], row[2]


async def creating_kernel(seed: Seed) -> tuple[uuid.UUID, dict[str, str]]:
    sid = await seed.session(
        status=SessionStatus.CREATING, kernel_status=KernelStatus.CREATING, agent_id="a1"
    )
    async with seed.engine.connect() as conn:
        kid = (await conn.execute(select(Kernel.id).where(Kernel.session_id == sid))).scalar_one()
    return sid, {"agent_id": "a1", "kernel_id": str(kid), "session_id": str(sid)}


async def test_running_stores_the_image_and_digest_and_later_events_keep_them(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    sid, ev = await creating_kernel(seed)
    plain, ev2 = await creating_kernel(seed)
    applier = KernelEventApplier(engine)
    moved = await applier.apply_many(
        [KernelRunning(**ev, pid=7, image=REF, image_digest=DIGEST), KernelRunning(**ev2, pid=8)]
    )
    assert sorted(m.to_status for m in moved) == ["RUNNING", "RUNNING"]
    assert await kernel_image(engine, sid) == ("RUNNING", REF, DIGEST)
    assert await kernel_image(engine, plain) == ("RUNNING", None, None)  # a process agent's kernel
    # A repeated running moves nothing, so writes nothing; the end keeps what was stored.
    other = KernelRunning(**ev, image="elsewhere/x:1", image_digest="sha256:" + "cd" * 32)
    assert await applier.apply_many([other]) == []
    await applier.apply_many([KernelTerminated(exit_code=0, **ev)])
    assert await kernel_image(engine, sid) == ("TERMINATED", REF, DIGEST)


async def test_running_then_ended_in_one_batch_still_stores_the_image(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    sid, ev = await creating_kernel(seed)
    moved = await KernelEventApplier(engine).apply_many(
        [KernelRunning(**ev, image=REF, image_digest=DIGEST), KernelTerminated(exit_code=0, **ev)]
    )
    assert [m.to_status for m in moved] == ["TERMINATED"]  # the running step folded into the end
    assert await kernel_image(engine, sid) == ("TERMINATED", REF, DIGEST)


async def test_values_too_long_are_dropped_and_the_batch_still_applies(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1")
    sid, ev = await creating_kernel(seed)
    long_ref = "registry.local/" + "r" * 600 + ":1"
    long_digest = "sha256:" + "f" * 200
    moved = await KernelEventApplier(engine).apply_many(
        [KernelRunning(**ev, image=long_ref, image_digest=long_digest, service_addr="http://" + "h" * 300)]
    )
    assert [m.to_status for m in moved] == ["RUNNING"]
    assert await kernel_image(engine, sid) == ("RUNNING", None, None)


IDS = {"agent_id": "a1", "kernel_id": str(uuid.uuid4()), "session_id": str(uuid.uuid4())}


@pytest.mark.parametrize(
    ("fields", "ref", "digest"),
    [
        ({"image": REF, "image_digest": DIGEST}, REF, DIGEST),
        ({"image": REF}, REF, None),
        ({"image_digest": DIGEST}, None, DIGEST),
        ({}, None, None),
        ({"image": "", "image_digest": ""}, None, None),
        ({"image": "x/" + "y" * 511, "image_digest": DIGEST}, None, DIGEST),  # 513 > 512
        ({"image": "x/" + "y" * 510, "image_digest": "sha256:" + "0" * 122}, "x/" + "y" * 510, None),
    ],
)
def test_a_running_transition_carries_what_fits(
    fields: dict[str, Any], ref: str | None, digest: str | None
) -> None:
    t = transition_for(KernelRunning(**IDS, **fields))
    assert t is not None and (t.to_status, t.image_ref, t.image_digest) == (KernelStatus.RUNNING, ref, digest)
    assert _bare(t) is (ref is None and digest is None)


def test_a_folded_step_hands_its_image_on() -> None:
    running = transition_for(KernelRunning(**IDS, image=REF, image_digest=DIGEST, service_addr="http://h:1"))
    ended = transition_for(KernelTerminated(**IDS))
    assert running is not None and ended is not None
    [kept] = _coalesce([running, ended])
    assert (kept.to_status, kept.image_ref, kept.image_digest, kept.service_addr) == (
        KernelStatus.TERMINATED,
        REF,
        DIGEST,
        "http://h:1",
    )
    # A step carrying nothing hands nothing on.
    pulling = transition_for(KernelPulling(**IDS))
    prepared = transition_for(KernelPrepared(**IDS))
    assert pulling is not None and prepared is not None
    [only] = _coalesce([pulling, prepared])
    assert only is prepared


def test_running_events_with_and_without_the_image_decode() -> None:
    new = KernelRunning(**IDS, pid=3, image=REF, image_digest=DIGEST)
    assert decode_event(encode_event(new, "secret"), "secret") == new
    old = KernelRunning.model_validate({**IDS, "pid": 3})
    assert (old.image, old.image_digest) == (None, None)
