"""What a guarded session write is asked to do (`SessionTransition`) and what it did
(`AppliedTransitions`); the writes are `session_writes` and `session_moves`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from sokovan.bus.user_events import UserEvent
from sokovan.common.types import KernelStatus, SchedulingResult, SessionResult, SessionStatus
from sokovan.state.status_info import SessionStatusInfo

# Statuses whose kernels are swept along when a session moves and no kernel guard is given.
_LIVE_KERNELS = frozenset(KernelStatus.non_terminal())


@dataclass(frozen=True)
class SessionTransition:
    """Move one session (and optionally its kernels) if it is still where the caller saw it.

    `to_status=None` keeps the status and only records history (and the status_info patch).
    `status_info` is merged into the stored one; `reset_attempts` starts the phase counter anew,
    `attempt` is what the history row shows.
    """

    session_id: uuid.UUID
    expected: frozenset[SessionStatus]
    to_status: SessionStatus | None
    handler: str
    result: SchedulingResult
    kernel_to: KernelStatus | None = None
    kernel_expected: frozenset[KernelStatus] = _LIVE_KERNELS
    session_result: SessionResult | None = None
    status_info: SessionStatusInfo | None = None
    message: str | None = None
    attempt: int = 0
    bump_attempts: bool = False
    reset_attempts: bool = False
    # status_info keys removed (after the merge of `status_info`)
    drop_info: frozenset[str] = frozenset()
    # Delete the session's kernels (all ended) and give it new PENDING ones (requeue only).
    replace_kernels: bool = False
    # A second step written with this one (`session_moves`, hand-offs only): the session goes on
    # to `then_to`, recorded as a run of `then_handler`; `kernel_to` is then where the kernels end.
    then_to: SessionStatus | None = None
    then_handler: str = ""


@dataclass
class AppliedTransitions:
    applied: list[uuid.UUID] = field(default_factory=list)
    stale: list[uuid.UUID] = field(default_factory=list)
    # session id → (from, to) for the sessions whose status actually changed
    moved: dict[uuid.UUID, tuple[SessionStatus, SessionStatus]] = field(default_factory=dict)
    # session id → owner (user id), for the sessions that moved
    owners: dict[uuid.UUID, str] = field(default_factory=dict)
    # the moved sessions that are replicas of a deployment (their routes care)
    replicas_moved: set[uuid.UUID] = field(default_factory=set)
    # session id → its new pending_reason, for the sessions that stayed PENDING with a new reason
    reasons: dict[uuid.UUID, str] = field(default_factory=dict)
    # session id → the status a two-step move (`then_to`) passed through; `moved` holds its ends
    via: dict[uuid.UUID, SessionStatus] = field(default_factory=dict)
    # what the kernels two-step moves swept along did (the agents' answers they stand for)
    kernel_events: list[UserEvent] = field(default_factory=list)

    def steps(self) -> list[tuple[uuid.UUID, SessionStatus, SessionStatus]]:
        """Each status change, a two-step move's two included."""
        out = []
        for sid, (src, dst) in self.moved.items():
            via = self.via.get(sid)
            out += [(sid, src, dst)] if via is None else [(sid, src, via), (sid, via, dst)]
        return out

    def events(self) -> list[UserEvent]:
        moved = [
            UserEvent(
                name="session.status",
                session_id=str(sid),
                from_status=src.value,
                to_status=dst.value,
                owner=self.owners.get(sid),
            )
            for sid, src, dst in self.steps()
        ]
        return (
            moved
            + self.kernel_events
            + [
                UserEvent(
                    name="session.pending_reason",
                    session_id=str(sid),
                    owner=self.owners.get(sid),
                    detail={"pending_reason": reason},
                )
                for sid, reason in self.reasons.items()
                if sid not in self.moved
            ]
        )
