"""Replays on the event bus, over real Redis, the real consumer and (for heartbeats) the manager's
real dispatcher and PostgreSQL: a copy of a signed entry put back on the stream, an entry signed
with a time that is not a finite recent time, and a withheld heartbeat of an older boot."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import HintPublisher
from sokovan.bus.streams import EventConsumer, consumer_backlog, fresh, nonce_key, stream_key
from sokovan.common.events import EVENT_KIND, EVENT_TAG, AgentEvent, KernelRunning, encode_event, seal
from sokovan.common.signing import SKEW, canonical, new_nonce, sign
from sokovan.common.types import AgentStatus
from sokovan.db.models import Agent
from sokovan.manager.event_dispatch import EventDispatcher
from tests.orchestrator.db_seed import Seed
from tests.orchestrator.test_node_lifecycle_db import beat

WAIT = 10.0


def refused(reason: str) -> float:
    return REGISTRY.get_sample_value("sokovan_bus_messages_refused_total", {"reason": reason}) or 0.0


def heartbeats_replayed() -> float:
    return REGISTRY.get_sample_value("sokovan_heartbeats_replayed_total") or 0.0


class Bus:
    """A stream of this test's own, and its managers' consumers run until it is all acknowledged."""

    def __init__(self, redis: aioredis.Redis, prefix: str, secret: str) -> None:
        self.redis, self.prefix, self.secret = redis, prefix, secret
        self.seen: list[AgentEvent] = []

    async def put(self, fields: dict[str, str]) -> None:
        entry: Any = fields
        await self.redis.xadd(stream_key(self.prefix), entry)

    async def consume(self, consumer: str, handler: Any = None) -> None:
        """Runs one manager's consumer until the group has read and acknowledged every entry."""

        async def record(events: list[AgentEvent]) -> None:
            self.seen.extend(events)

        stop = asyncio.Event()
        reader = EventConsumer(self.redis, self.prefix, self.secret, consumer, handler or record, block_ms=50)
        await reader.ensure_group()
        task = asyncio.create_task(reader.run(stop))
        try:
            async with asyncio.timeout(WAIT):
                while True:
                    pending = await self.redis.xpending(stream_key(self.prefix), "managers")
                    if await consumer_backlog(self.redis, self.prefix) == 0 and pending["pending"] == 0:
                        break
                    await asyncio.sleep(0.02)
        finally:
            stop.set()
            await asyncio.wait_for(task, 5)


@pytest.fixture
def bus(redis: aioredis.Redis, settings: Any) -> Bus:
    return Bus(redis, f"{settings.etcd_prefix}-replay-{uuid.uuid4().hex[:8]}", settings.cluster_secret or "")


def running(kernel_id: str) -> KernelRunning:
    return KernelRunning(agent_id="a1", kernel_id=kernel_id, session_id="s")


async def test_a_replayed_event_is_refused_by_another_manager_acknowledged_and_counted(bus: Bus) -> None:
    fields = encode_event(running("k1"), bus.secret)
    await bus.put(fields)
    await bus.consume("manager-1")
    before = refused("replayed")

    await bus.put(fields)  # the same signed entry, put back
    await bus.put(encode_event(running("k2"), bus.secret))
    await bus.consume("manager-2")  # another manager of the group reads the copy

    assert [e.kernel_id for e in bus.seen if isinstance(e, KernelRunning)] == ["k1", "k2"]
    assert refused("replayed") == before + 1


def _signed_at(secret: str, data: str, ts: str) -> dict[str, str]:
    """An entry signed with the right secret over whatever time `ts` says."""
    nonce = new_nonce()
    sig = sign(secret, canonical(EVENT_TAG, [EVENT_KIND], ts, nonce, data.encode()))
    return {"data": data, "ts": ts, "nonce": nonce, "sig": sig}


BAD_TIMES = {
    "nan": "nan",
    "inf": "inf",
    "overflow": "1e400",
    "negative": "-1",
    "year 5138": "99999999999",
    "an hour ago": f"{time.time() - 3600:.3f}",
    "an hour ahead": f"{time.time() + 3600:.3f}",
}


@pytest.mark.parametrize("case", sorted(BAD_TIMES))
async def test_an_entry_signed_with_a_bad_time_is_refused_and_counted(case: str, bus: Bus) -> None:
    before = refused("time")
    await bus.put(_signed_at(bus.secret, running("bad").model_dump_json(), BAD_TIMES[case]))
    await bus.put(encode_event(running("good"), bus.secret))
    await bus.consume("manager-1")
    assert [e.kernel_id for e in bus.seen if isinstance(e, KernelRunning)] == ["good"]
    assert refused("time") == before + 1


async def test_an_entry_without_time_or_nonce_is_refused(bus: Bus) -> None:
    data = running("old-format").model_dump_json()
    await bus.put({"data": data, "sig": sign(bus.secret, data.encode())})  # the envelope before nonces
    await bus.put(seal(data, bus.secret, nonce="z" * 32))
    await bus.consume("manager-1")
    assert bus.seen == []


@pytest.mark.parametrize(
    ("signed", "added", "now", "ok"),
    [
        (1000.0, 1000.0, 1000.0, True),
        (1000.0, 1300.0, 1300.0, True),  # taken at the edge of the window
        (1000.0, 1300.1, 1300.1, False),  # an old entry put back later
        (1000.0, 1010.0, 9000.0, True),  # a backlog read late (after an outage) still counts
        (1300.0, 1000.0, 1000.0, True),  # the agent's clock a little ahead
        (1300.1, 1000.0, 1000.0, False),
        (1000.0, None, 1000.0, False),
    ],
)
def test_fresh(signed: float, added: float | None, now: float, ok: bool) -> None:
    assert fresh(signed, added, now) is ok


async def _agent(engine: AsyncEngine) -> Any:
    async with engine.connect() as conn:
        return (
            await conn.execute(
                select(Agent.status, Agent.boot_id, Agent.heartbeat_seq, Agent.rejected_beats).where(
                    Agent.id == "n1"
                )
            )
        ).one()


async def test_a_replayed_heartbeat_is_refused_and_counted(engine: AsyncEngine, bus: Bus) -> None:
    await Seed(engine).tenancy()
    dispatch = EventDispatcher(engine, HintPublisher(bus.redis, bus.prefix))
    fields = encode_event(beat("n1", 1), bus.secret)
    await bus.put(fields)
    await bus.consume("manager-1", dispatch)
    assert (await _agent(engine)).status == "READY"
    async with engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "n1").values(status=AgentStatus.DOWN.value))
    before = refused("replayed")

    await bus.put(fields)
    await bus.consume("manager-2", dispatch)

    assert refused("replayed") == before + 1
    assert (await _agent(engine)).status == "DOWN"


async def test_an_old_heartbeat_of_another_boot_does_not_bring_a_down_agent_back(
    engine: AsyncEngine, bus: Bus
) -> None:
    """A beat of the agent's previous boot, signed (so within the window) but withheld, is sent
    after the agent restarted and went DOWN: refused, as it was signed before the last accepted."""
    await Seed(engine).tenancy()
    dispatch = EventDispatcher(engine, HintPublisher(bus.redis, bus.prefix))
    old = beat("n1", 500, boot="old")
    withheld = encode_event(old.model_copy(update={"at": old.at - dt.timedelta(seconds=60)}), bus.secret)
    await bus.put(encode_event(beat("n1", 1, boot="new"), bus.secret))
    await bus.consume("manager-1", dispatch)
    async with engine.begin() as conn:
        await conn.execute(update(Agent).where(Agent.id == "n1").values(status=AgentStatus.DOWN.value))
    before = heartbeats_replayed()

    await bus.put(withheld)
    await bus.consume("manager-1", dispatch)

    row = await _agent(engine)
    assert (row.status, row.boot_id, row.heartbeat_seq, row.rejected_beats) == ("DOWN", "new", 1, 1)
    assert heartbeats_replayed() == before + 1

    # The agent's own next beat brings it back, as any beat of its current registration does.
    await bus.put(encode_event(beat("n1", 2, boot="new"), bus.secret))
    await bus.consume("manager-1", dispatch)
    assert (await _agent(engine)).status == "READY"


async def test_copies_within_one_read_are_refused_and_every_nonce_is_kept_for_the_window(bus: Bus) -> None:
    """One read claims all its nonces at once: the first entry carrying a nonce is taken, a copy
    later in the same read is refused, and each nonce key expires after the replay window."""
    first, second = encode_event(running("k1"), bus.secret), encode_event(running("k2"), bus.secret)
    for fields in (first, second, first, second, first):
        await bus.put(fields)
    before = refused("replayed")
    await bus.consume("manager-1")
    assert [e.kernel_id for e in bus.seen if isinstance(e, KernelRunning)] == ["k1", "k2"]
    assert refused("replayed") == before + 3
    for fields in (first, second):
        ttl = await bus.redis.ttl(nonce_key(bus.prefix, fields["nonce"]))
        assert 0 < ttl <= 2 * SKEW + 2
