"""The provisioner's stage interfaces: each is one small method over the snapshot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sokovan.orchestrator.handler_types import SessionWithKernels
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, ScalingGroupSnapshot


class Validator(Protocol):
    name: str

    def check(self, session: SessionWithKernels, snapshot: ScalingGroupSnapshot) -> str | None:
        """None when the session may be placed now, else why it must wait."""


class Sequencer(Protocol):
    name: str

    def sequence(
        self, sessions: Sequence[SessionWithKernels], snapshot: ScalingGroupSnapshot
    ) -> list[SessionWithKernels]:
        """The order in which sessions are offered to the selector."""


class Selector(Protocol):
    name: str

    def pick(self, session: SessionWithKernels, candidates: Sequence[AgentSnapshot]) -> AgentSnapshot:
        """Choose one of `candidates`, all of which have room for the request (never empty)."""
