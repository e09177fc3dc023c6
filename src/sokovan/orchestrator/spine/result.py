"""What a handler reports: per-entity outcomes, never statuses. The coordinator decides the rest."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Generic, TypeVar

InfoT = TypeVar("InfoT")


@dataclass
class HandlerResult(Generic[InfoT]):
    """Per-entity outcomes of one handler run.

    A failure was attempted and failed (it counts a try); a skip could not be attempted (no room,
    waiting) and only leaves a note — `skipped` maps id → reason. `InfoT` is the entity's typed
    status_info (for sessions, `SessionStatusInfo`).
    """

    successes: list[uuid.UUID] = field(default_factory=list)
    failures: dict[uuid.UUID, str] = field(default_factory=dict)
    skipped: dict[uuid.UUID, str] = field(default_factory=dict)
    # Extra status_info written with a success (e.g. why a session is terminating).
    success_info: dict[uuid.UUID, InfoT] = field(default_factory=dict)
    # Entities that can never succeed in this stage (a failed dependency, a type no longer allowed):
    # the give-up transition applies at once, with this status_info (cause, message).
    rejected: dict[uuid.UUID, InfoT] = field(default_factory=dict)
    # Entities whose facts were out of date when looked at (routes: a health report gone stale).
    stale: dict[uuid.UUID, str] = field(default_factory=dict)
    # status_info written with whatever outcome an entity had (deployments and routes).
    info: dict[uuid.UUID, InfoT] = field(default_factory=dict)

    @property
    def attempted(self) -> set[uuid.UUID]:
        return set(self.successes) | set(self.failures) | set(self.rejected) | set(self.stale)
