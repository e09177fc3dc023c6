"""The provisioner's stage interfaces: each is one small method over the snapshot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sokovan.orchestrator.handler_types import SessionWithKernels
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, ScalingGroupSnapshot


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
    name: str

    def pick(
        self, session: SessionWithKernels, candidates: Sequence[AgentSnapshot], snapshot: ScalingGroupSnapshot
    ) -> AgentSnapshot:
        """Choose one of `candidates`, all of which have room for the request (never empty)."""
