"""The `fair_share` sequencer over in-memory snapshots: Fair Tree levels (domain, then project,
then user; higher factor first) inside priority bands, factors compared to two decimals, ties by
creation; without a view, creation order."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

import pytest

from sokovan.common.fair_share import FairShareConfig, FairShareView, Share, UsageInterval, fair_share_view
from sokovan.orchestrator.provisioner import registry
from sokovan.state.session_reads import SessionWithKernels
from tests.orchestrator.factories import PROJECT, T0, agent, session, snapshot

A, B, C = uuid.UUID(int=0xA), uuid.UUID(int=0xB), uuid.UUID(int=0xC)
P2 = uuid.UUID(int=2)
HOUR = FairShareConfig(half_life_hours=1)
CAPACITY = {"cuda.device": 8}


def owned(
    name: str,
    user: uuid.UUID,
    created: int,
    priority: int = 10,
    project: uuid.UUID = PROJECT,
    domain: str = "default",
) -> tuple[str, SessionWithKernels]:
    s = session(user=user, created=created, priority=priority, project=project)
    return name, dataclasses.replace(s, domain_name=domain)


def view_of(factors: dict[tuple[str, ...], float]) -> FairShareView:
    levels = ("domain", "project", "user")
    return FairShareView(
        {path: Share(levels[len(path) - 1], path, 0.0, 1.0, f) for path, f in factors.items()}  # type: ignore[arg-type]
    )


def order(sessions: list[tuple[str, SessionWithKernels]], view: FairShareView | None) -> list[str]:
    names = {s.id: n for n, s in sessions}
    snap = snapshot(agent("a"), scheduler="fair_share", fair_share=view)
    return [names[s.id] for s in registry.sequencer("fair_share").sequence([s for _, s in sessions], snap)]


def user(u: uuid.UUID, project: uuid.UUID = PROJECT, domain: str = "default") -> tuple[str, str, str]:
    return (domain, str(project), str(u))


def test_it_is_registered_by_name() -> None:
    assert "fair_share" in registry.SEQUENCERS
    assert registry.sequencer("fair_share").name == "fair_share"


CASES: list[
    tuple[str, list[tuple[str, uuid.UUID, int, int, uuid.UUID, str]], dict[tuple[str, ...], float], list[str]]
] = [
    (
        "no view: creation order",
        [("a1", A, 0, 10, PROJECT, "default"), ("b1", B, 1, 10, PROJECT, "default")],
        {},
        ["a1", "b1"],
    ),
    (
        "the user who used less goes first",
        [
            ("a1", A, 0, 10, PROJECT, "default"),
            ("b1", B, 1, 10, PROJECT, "default"),
            ("a2", A, 2, 10, PROJECT, "default"),
        ],
        {user(A): 0.6},
        ["b1", "a1", "a2"],
    ),
    (
        "factors equal to two decimals: creation order",
        [("a1", A, 0, 10, PROJECT, "default"), ("b1", B, 1, 10, PROJECT, "default")],
        {user(A): 0.996, user(B): 1.0},
        ["a1", "b1"],
    ),
    (
        "priority bands come first",
        [
            ("a-hi", A, 0, 50, PROJECT, "default"),
            ("b-lo", B, 1, 10, PROJECT, "default"),
            ("a-lo", A, 2, 10, PROJECT, "default"),
        ],
        {user(A): 0.1},
        ["a-hi", "b-lo", "a-lo"],
    ),
    (
        "the domain's factor before the user's",
        [("a1", A, 0, 10, PROJECT, "busy"), ("c1", C, 1, 10, PROJECT, "quiet")],
        {("busy",): 0.4, user(A, domain="busy"): 1.0, ("quiet",): 0.9, user(C, domain="quiet"): 0.2},
        ["c1", "a1"],
    ),
    (
        "then the project's within the domain",
        [("a1", A, 0, 10, PROJECT, "default"), ("b1", B, 1, 10, P2, "default")],
        {("default", str(PROJECT)): 0.5, ("default", str(P2)): 0.8, user(A): 1.0, user(B, P2): 0.3},
        ["b1", "a1"],
    ),
]


@pytest.mark.parametrize(("case", "rows", "factors", "want"), CASES, ids=[c[0] for c in CASES])
def test_order(
    case: str,
    rows: list[tuple[str, uuid.UUID, int, int, uuid.UUID, str]],
    factors: dict[tuple[str, ...], float],
    want: list[str],
) -> None:
    sessions = [owned(n, u, c, p, pr, d) for n, u, c, p, pr, d in rows]
    assert order(sessions, view_of(factors) if factors else None) == want


def test_past_usage_puts_its_user_behind_until_it_has_decayed() -> None:
    """The issue's check on a virtual clock: A ran the GPUs for ten hours, B never ran; equal
    weights. B's sessions start first; twelve half-lives later, creation order again."""
    ran = UsageInterval("default", str(PROJECT), str(A), {"cuda.device": 8}, T0 - dt.timedelta(hours=10), T0)
    sessions = [owned("a1", A, 0), owned("b1", B, 1), owned("a2", A, 2), owned("b2", B, 3)]
    pending = [user(A), user(B)]
    now = fair_share_view([ran], HOUR, T0, CAPACITY, pending=pending)
    assert order(sessions, now) == ["b1", "b2", "a1", "a2"]
    later = fair_share_view([ran], HOUR, T0 + dt.timedelta(hours=12), CAPACITY, pending=pending)
    assert order(sessions, later) == ["a1", "b1", "a2", "b2"]
