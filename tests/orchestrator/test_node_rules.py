"""The node lifecycle's pure rules, table-driven: a heartbeat's moves, and correlated silence."""

from __future__ import annotations

import datetime as dt

import pytest

from sokovan.common.types import AgentStatus
from sokovan.orchestrator.node.handler import AgentRow, silence
from sokovan.orchestrator.node.mass_silence import group_silence
from sokovan.state.agent_beats import BeatOutcome, on_heartbeat

A = AgentStatus
NOW = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("status", "disabled", "new_boot", "healthy", "failures", "final", "path"),
    [
        (None, False, False, True, 0, A.READY, [A.BOOTING, A.READY]),
        (None, False, False, False, 0, A.BOOTING, [A.BOOTING]),
        (A.UNKNOWN, False, False, True, 0, A.READY, [A.BOOTING, A.READY]),
        (A.BOOTING, False, False, False, 1, A.BOOTING, []),
        (A.BOOTING, False, False, False, 2, A.FAILED, [A.FAILED]),
        (A.READY, False, False, True, 0, A.READY, []),
        (A.READY, False, False, False, 0, A.DEGRADED, [A.DEGRADED]),
        (A.READY, False, True, True, 0, A.READY, [A.BOOTING, A.READY]),
        (A.DEGRADED, False, False, True, 0, A.READY, [A.READY]),
        (A.DEGRADED, False, False, False, 0, A.DEGRADED, []),
        (A.DEGRADED, False, True, False, 0, A.BOOTING, [A.BOOTING]),
        (A.DOWN, False, False, True, 0, A.READY, [A.BOOTING, A.READY]),
        (A.DOWN, True, True, True, 0, A.DOWN, []),
        (A.DRAINING, False, True, True, 0, A.DRAINING, []),
        (A.DRAINED, False, False, False, 0, A.DRAINED, []),
        (A.FAILED, False, True, True, 0, A.FAILED, []),
    ],
)
def test_what_a_heartbeat_does(
    status: AgentStatus | None,
    disabled: bool,
    new_boot: bool,
    healthy: bool,
    failures: int,
    final: AgentStatus,
    path: list[AgentStatus],
) -> None:
    out: BeatOutcome = on_heartbeat(
        status, disabled=disabled, new_boot=new_boot, healthy=healthy, problems="disk", boot_failures=failures
    )
    assert out.status == final
    assert [m.dst for m in out.moves] == path


def row(agent_id: str, quiet: float, status: AgentStatus = A.READY, group: str = "g") -> AgentRow:
    at = NOW - dt.timedelta(seconds=quiet)
    return AgentRow(agent_id, status.value, group, "standard", at, at)


def test_silence_is_strictly_longer_than_the_timeout() -> None:
    assert silence(row("a", 30), NOW) == 30
    groups = group_silence([row("a", 30), row("b", 30), row("c", 0)], NOW, timeout=30)
    assert groups["g"].silent == 0  # exactly the timeout is not silent yet
    groups = group_silence([row("a", 30.001), row("b", 30.001), row("c", 0)], NOW, timeout=30)
    assert groups["g"].silent == 2 and groups["g"].held


@pytest.mark.parametrize(
    ("quiet", "held"),
    [
        ([40], False),  # one silent agent of one is never a mass silence
        ([40, 0], False),  # half is not more than half
        ([40, 45, 0], True),
        ([40, 100, 0], False),  # not within one timeout of each other
        ([40, 45, 50, 0, 0, 0, 0], False),
        ([40, 45, 50, 55, 0, 0, 0], True),
    ],
)
def test_mass_silence_needs_more_than_half_silent_together(quiet: list[float], held: bool) -> None:
    agents = [row(f"a{i}", q) for i, q in enumerate(quiet)]
    assert group_silence(agents, NOW, timeout=30)["g"].held is held


def test_only_agents_expected_to_beat_count() -> None:
    agents = [row("a", 40), row("b", 40), row("c", 0, A.DOWN), row("d", 0, A.FAILED), row("e", 0, A.BOOTING)]
    assert group_silence(agents, NOW, timeout=30)["g"].agents == 2
