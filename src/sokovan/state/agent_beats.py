"""What a heartbeat does to an agent's status (node lifecycle, seed 002): a pure rule.

| status now | the beat | moves |
|---|---|---|
| (none), UNKNOWN | any | → BOOTING, then as BOOTING |
| BOOTING | healthy | → READY |
| BOOTING | unhealthy | stays; the 3rd unhealthy boot report in a row → FAILED |
| READY | new boot | → BOOTING, then as BOOTING |
| READY | unhealthy | → DEGRADED (out of placement, kernels untouched) |
| DEGRADED | new boot | → BOOTING, then as BOOTING |
| DEGRADED | healthy | → READY (a beat within the grace: nothing disturbed) |
| DOWN | not disabled | → BOOTING, then as BOOTING |
| DOWN (disabled), DRAINING, DRAINED, FAILED | any | stays: an operator's state |

Silence (READY → DEGRADED → DOWN) and a boot that takes too long (BOOTING → FAILED) are judged by
the node lifecycle lane of the orchestrator, not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sokovan.common.types import AgentStatus

A = AgentStatus
BOOT_FAILURES_LIMIT = 3  # unhealthy boot reports in a row before an agent is FAILED


@dataclass(frozen=True)
class Move:
    src: AgentStatus | None
    dst: AgentStatus
    reason: str


@dataclass(frozen=True)
class BeatOutcome:
    """Where the beat leaves the agent: its status, the moves that took it there, and the count
    of unhealthy boot reports in a row."""

    status: AgentStatus
    boot_failures: int
    moves: tuple[Move, ...] = field(default=())


def on_heartbeat(
    status: AgentStatus | None,
    *,
    disabled: bool,
    new_boot: bool,
    healthy: bool,
    problems: str,
    boot_failures: int,
) -> BeatOutcome:
    moves: list[Move] = []
    if status in (None, A.UNKNOWN):
        moves.append(Move(status, A.BOOTING, "first report"))
        status, boot_failures = A.BOOTING, 0
    elif status in (A.READY, A.DEGRADED) and new_boot:
        moves.append(Move(status, A.BOOTING, "the agent restarted (new boot)"))
        status, boot_failures = A.BOOTING, 0
    elif status == A.DOWN and not disabled:
        moves.append(Move(status, A.BOOTING, "reported again after DOWN"))
        status, boot_failures = A.BOOTING, 0
    if status == A.BOOTING:
        if healthy:
            moves.append(Move(A.BOOTING, A.READY, "healthy heartbeat"))
            return BeatOutcome(A.READY, 0, tuple(moves))
        boot_failures += 1
        if boot_failures >= BOOT_FAILURES_LIMIT:
            reason = f"{boot_failures} unhealthy boot reports in a row: {problems}"
            moves.append(Move(A.BOOTING, A.FAILED, reason))
            return BeatOutcome(A.FAILED, boot_failures, tuple(moves))
        return BeatOutcome(A.BOOTING, boot_failures, tuple(moves))
    if status == A.READY and not healthy:
        return BeatOutcome(A.DEGRADED, boot_failures, (Move(A.READY, A.DEGRADED, f"unhealthy: {problems}"),))
    if status == A.DEGRADED and healthy:
        return BeatOutcome(A.READY, boot_failures, (Move(A.DEGRADED, A.READY, "heartbeat resumed, healthy"),))
    assert status is not None
    return BeatOutcome(status, boot_failures, tuple(moves))
