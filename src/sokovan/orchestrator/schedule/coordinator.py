"""ScheduleCoordinator: the coordinator spine over sessions.

Handlers only say success / failure / skip. The coordinator judges failures (NEED_RETRY, GIVE_UP
or EXPIRED, by `classify`) and waits (EXPIRED), then applies the handler's transition table
through guarded, batched writes with history (`judgement`, `SessionKind`).

Handlers run in lanes: ordered lists, each run as one cycle under its own cluster-wide lock, so
lanes run concurrently (placement does not wait for the agents' answers to the previous batch)
while each behaves as if one manager ran it. `cycle()` runs all lanes in turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import Hint
from sokovan.bus.user_events import UserEventPublisher
from sokovan.config.cluster import ClusterConfig
from sokovan.orchestrator.locks import CycleLock
from sokovan.orchestrator.schedule.handler import SessionHandler
from sokovan.orchestrator.schedule.sessions_kind import SessionKind
from sokovan.orchestrator.spine.coordinator import Coordinator
from sokovan.orchestrator.spine.result import HandlerResult
from sokovan.state.session_reads import SessionWithKernels
from sokovan.state.session_writes import SessionTransition
from sokovan.state.status_info import SessionStatusInfo


class ScheduleCoordinator(
    Coordinator[SessionHandler, SessionWithKernels, SessionTransition, HandlerResult[SessionStatusInfo]]
):
    def __init__(
        self,
        engine: AsyncEngine,
        config: ClusterConfig,
        handlers: Sequence[SessionHandler] | Mapping[str, Sequence[SessionHandler]],
        lock: CycleLock | None = None,
        events: UserEventPublisher | None = None,
    ) -> None:
        lanes = handlers if isinstance(handlers, Mapping) else {"all": handlers}
        super().__init__(Hint.SCHEDULE, SessionKind(config), engine, lanes, lock, events)
