"""The provisioner's stage interfaces: each is one small method over the snapshot."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, ScalingGroupSnapshot
from sokovan.state.session_reads import SessionWithKernels


@dataclass(frozen=True)
class Wait:
    """The session cannot be placed now; `reason` says why (it becomes its pending_reason)."""

    reason: str


@dataclass(frozen=True)
class Reject:
    """The session can never be placed: it is cancelled with `cause`."""

    cause: str
    message: str


Verdict = Wait | Reject | None


class Validator(Protocol):
    name: str

    def check(self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot) -> Verdict:
        """None when the session may be placed now."""


class Sequencer(Protocol):
    name: str

    def sequence(
        self, sessions: Sequence[SessionWithKernels], snapshot: ScalingGroupSnapshot
    ) -> list[SessionWithKernels]:
        """The order in which sessions are offered to the selector (priority bands first)."""


class Selector(Protocol):
    """Walks the group's agents in its own order and returns the first that `fits` accepts.

    `taken` is called after an agent received kernels, so that a selector keeping an ordered
    index over the agents can re-key that one agent instead of re-sorting all of them.
    """

    name: str

    def pick(
        self,
        session: SessionWithKernels,
        fits: Callable[[AgentSnapshot], bool],
        snapshot: ScalingGroupSnapshot,
    ) -> AgentSnapshot | None: ...

    def taken(self, agent: AgentSnapshot) -> None: ...
