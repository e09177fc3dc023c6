"""Hand-offs between the session lanes: which lanes a status just entered is work for.

A lane that moved sessions wakes exactly these lanes (in this manager, or through a hint in the
manager that holds them), so a session moves on at once instead of waiting for another lane's next
cycle, and lanes with nothing to do are not woken. The long cycle stays the safety net for
anything this table leaves out.
"""

from __future__ import annotations

from sokovan.bus.hints import Hint
from sokovan.common.types import SessionStatus

S = SessionStatus


def lane(name: str) -> str:
    """The hint name of one session lane (also its loop's and its lock's name)."""
    return f"{Hint.SCHEDULE}.{name}"


PLACE, PREPARE, START, END = lane("place"), lane("prepare"), lane("start"), lane("end")
_ENDED = frozenset({PLACE, Hint.RETRY.value})  # room freed, dependents unblocked, a retry may be due

HANDOFFS: dict[str, frozenset[str]] = {
    S.PENDING.value: frozenset({PLACE}),  # requeued (preemption, reschedule)
    S.SCHEDULED.value: frozenset({PREPARE}),
    S.PREPARED.value: frozenset({START}),
    S.TERMINATING.value: frozenset({END}),
    S.TERMINATED.value: _ENDED,
    S.ERROR.value: _ENDED,
    S.CANCELLED.value: _ENDED,
}


def next_lanes(statuses: frozenset[str]) -> frozenset[str]:
    """The lanes to wake for sessions that just entered `statuses` (status values)."""
    out: frozenset[str] = frozenset()
    for status in statuses:
        out |= HANDOFFS.get(status, frozenset())
    return out
