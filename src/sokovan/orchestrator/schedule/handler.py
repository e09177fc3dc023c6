"""A session handler: one stage of a session's life, declared at the top of its class.

Every session handler — lifecycle work (placing, calling agents, terminating) and promotions alike —
declares the same things, read the same way by the `ScheduleCoordinator`:

- `targets`: the session statuses it works on;
- `kernels`: which of those sessions are read, by their kernels (ANY of some statuses for
  lifecycle work; ALL / ANY / NOT_ANY for a promotion), or None for all of them;
- `phase`: whose limits (timeout, tries) in `manager/phases` judge its failures and waits;
- `expires_in`: the statuses in which a session that waits past the phase's timeout expires
  (None: every target status);
- `transitions`: its `StatusTransitions` table — where success, need_retry, expired and give_up
  take the session and its kernels;
- `batch`: at most this many sessions a read (the oldest first);
- `placement_window`: read through the fair placement window (`manager/placement_window`: a
  bounded share per scaling group and keypair, dependency-blocked sessions left out) instead of
  the oldest sessions of the cluster — the placement lane's read;
- `narrow(now)`: an extra SQL condition on the read, so a handler that acts on few of its target
  sessions (e.g. those past their lifetime) reads only those; `narrowing(now)` the same condition
  as a kept statement with bound parameters, for the handlers that read several times a second.

`execute` does the work and reports successes, failures and skips; the coordinator decides what
they mean. `name` (what the history shows) is the class name unless the class or instance sets it.
"""

from __future__ import annotations

import abc
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement

from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import Phase
from sokovan.orchestrator.spine.result import HandlerResult
from sokovan.state.session_queries import BATCH_LIMIT, KernelMatchType, Narrowing
from sokovan.state.session_reads import SessionWithKernels
from sokovan.state.status_info import SessionStatusInfo

SessionResultT = HandlerResult[SessionStatusInfo]


@dataclass(frozen=True)
class TransitionStatus:
    """Where an outcome takes the session and its kernels; None keeps that entity's status.

    `drop_info` removes status_info keys; `replace_kernels` gives the session new PENDING kernels
    in place of its ended ones (a requeued preemption victim: the one way back from TERMINATING)."""

    session: SessionStatus | None = None
    kernel: KernelStatus | None = None
    drop_info: frozenset[str] = frozenset()
    replace_kernels: bool = False


@dataclass(frozen=True)
class StatusTransitions:
    """A handler's table; a None entry changes no status and only records history."""

    success: TransitionStatus | None = None
    need_retry: TransitionStatus | None = None
    expired: TransitionStatus | None = None
    give_up: TransitionStatus | None = None


@dataclass(frozen=True)
class KernelCondition:
    """Which sessions a handler reads, by their kernels: ANY / ALL / NOT_ANY of `statuses`."""

    statuses: frozenset[KernelStatus]
    match: KernelMatchType = KernelMatchType.ANY


class SessionHandler(abc.ABC):
    name: str
    targets: frozenset[SessionStatus]
    kernels: KernelCondition | None = None
    phase: Phase | None = None
    expires_in: frozenset[SessionStatus] | None = None
    transitions: StatusTransitions
    always_runs: bool = False
    placement_window: bool = False
    batch: int = BATCH_LIMIT

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__

    def expires(self, status: SessionStatus) -> bool:
        """Whether a session in `status` expires when it waits past this handler's timeout."""
        return self.phase is not None and status in (
            self.targets if self.expires_in is None else self.expires_in
        )

    def narrow(self, now: dt.datetime) -> ColumnElement[bool] | None:
        """An extra condition on the sessions read for this handler (None: all in its targets)."""
        return None

    def narrowing(self, now: dt.datetime) -> Narrowing | None:
        """`narrow` in a form whose statement is kept between reads (None: `narrow` is built at
        each read)."""
        return None

    @abc.abstractmethod
    async def execute(self, targets: Sequence[SessionWithKernels]) -> SessionResultT: ...
