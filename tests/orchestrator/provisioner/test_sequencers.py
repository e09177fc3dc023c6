"""Sequencers, table-driven: FIFO, LIFO, DRF, inside priority bands."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest

from sokovan.common.slots import ResourceSlots
from sokovan.orchestrator.provisioner import registry
from sokovan.orchestrator.provisioner.sequencers.drf import dominant_share
from tests.orchestrator.factories import agent, session, snapshot

U1, U2, U3 = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)


def names(order: list[object], by: dict[object, str]) -> list[str]:
    return [by[s.id] for s in order]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("scheduler", "want"),
    [("fifo", ["hi-old", "hi-new", "lo-old", "lo-new"]), ("lifo", ["hi-new", "hi-old", "lo-new", "lo-old"])],
)
def test_fifo_and_lifo_inside_priority_bands(scheduler: str, want: list[str]) -> None:
    sessions = {
        "lo-old": session(priority=10, created=0),
        "hi-old": session(priority=50, created=1),
        "lo-new": session(priority=10, created=2),
        "hi-new": session(priority=50, created=3),
    }
    by = {s.id: n for n, s in sessions.items()}
    order = registry.sequencer(scheduler).sequence(list(sessions.values()), snapshot())
    assert names(order, by) == want  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("allocated", "capacity", "want"),
    [
        ({"cpu": 6, "mem": 1}, {"cpu": 10, "mem": 10}, Decimal("0.6")),
        ({"cpu": 1, "mem": 4}, {"cpu": 10, "mem": 10}, Decimal("0.4")),
        (
            {"cpu": 1, "cuda.device": 1},
            {"cpu": 10, "cuda.device": 0},
            Decimal("0.1"),
        ),  # capacity-0 slot ignored
        ({}, {"cpu": 10}, Decimal(0)),
    ],
)
def test_dominant_share(allocated: dict[str, int], capacity: dict[str, int], want: Decimal) -> None:
    assert dominant_share(ResourceSlots.parse(allocated), ResourceSlots.parse(capacity)) == want


def drf_snapshot(allocated: dict[uuid.UUID, dict[str, object]]) -> object:
    snap = snapshot(agent("a", cpu=10, mem="10g"), scheduler="drf")
    for user, slots in allocated.items():
        snap.user_allocated[user] = ResourceSlots.parse(slots)
    return snap


def test_drf_serves_the_smaller_dominant_share_first() -> None:
    # user 1 holds (cpu 0.6, mem 0.1), user 2 holds (cpu 0.1, mem 0.4): user 2's share 0.4 < 0.6.
    snap = drf_snapshot({U1: {"cpu": 6, "mem": "1g"}, U2: {"cpu": 1, "mem": "4g"}})
    first, second = session(user=U1, created=0), session(user=U2, created=1)
    order = registry.sequencer("drf").sequence([first, second], snap)  # type: ignore[arg-type]
    assert [s.user_id for s in order] == [U2, U1]


def test_drf_new_users_first_then_progressive_filling_and_creation_order_on_ties() -> None:
    snap = drf_snapshot({U1: {"cpu": 1}})
    s = [
        session(user=U1, created=0, cpu=1),
        session(user=U2, created=1, cpu=4),
        session(user=U2, created=2, cpu=1),
        session(user=U3, created=3, cpu=1),
    ]
    order = registry.sequencer("drf").sequence(s, snap)  # type: ignore[arg-type]
    # U2 and U3 are new (share 0): creation order breaks the tie → U2 first; U2 then holds 0.4,
    # so U3 (0) goes, then U1 (0.1), then U2's second session.
    assert [x.id for x in order] == [s[1].id, s[3].id, s[0].id, s[2].id]


def test_drf_respects_priority_bands() -> None:
    snap = drf_snapshot({U1: {"cpu": 9}})
    low_new_user, high_heavy_user = session(user=U2, priority=10), session(user=U1, priority=90)
    order = registry.sequencer("drf").sequence([low_new_user, high_heavy_user], snap)  # type: ignore[arg-type]
    assert [x.id for x in order] == [high_heavy_user.id, low_new_user.id]
