"""Sessions as an entity of the coordinator spine: how they are read, judged, written and counted."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.bus.hints import Hint
from sokovan.common.metrics import SESSION_TRANSITIONS
from sokovan.common.types import SchedulingResult
from sokovan.config.cluster import ClusterConfig
from sokovan.orchestrator.schedule.handler import SessionHandler, SessionResultT
from sokovan.orchestrator.schedule.judgement import judge, phase_timeout
from sokovan.orchestrator.spine.coordinator import Applied
from sokovan.state.session_moves import moves_only
from sokovan.state.session_queries import PlacementWindow
from sokovan.state.session_reads import SessionWithKernels, fetch_sessions
from sokovan.state.session_writes import SessionTransition, apply_session_transitions


def _table_extras(handler: SessionHandler, change: SessionTransition) -> SessionTransition:
    """A success carries what its table entry says besides statuses (keys dropped, kernels replaced)."""
    to = handler.transitions.success
    if change.result is not SchedulingResult.SUCCESS or to is None:
        return change
    if not (to.drop_info or to.replace_kernels):
        return change
    return dataclasses.replace(change, drop_info=to.drop_info, replace_kernels=to.replace_kernels)


class SessionKind:
    entity = "session"

    def __init__(self, config: ClusterConfig) -> None:
        self._config = config

    async def load(
        self, conn: AsyncConnection, handler: SessionHandler, now: dt.datetime
    ) -> Sequence[SessionWithKernels]:
        """The sessions in the handler's targets whose kernels meet its condition, and those that
        waited past the phase's timeout in one of its `expires_in` statuses (whatever their kernels)."""
        cond = handler.kernels
        window = self._config.placement_window
        narrowing = handler.narrowing(now)
        rows = await fetch_sessions(
            conn,
            handler.targets,
            cond.statuses if cond else None,
            handler.batch,
            match=cond.match if cond else None,
            where=handler.narrow(now) if narrowing is None else None,
            narrowing=narrowing,
            window=PlacementWindow(window.limit, window.per_owner) if handler.placement_window else None,
            now=now,
        )
        timeout = phase_timeout(handler, self._config)
        if handler.expires_in and timeout > 0:
            seen = {s.id for s in rows}
            stuck = await fetch_sessions(
                conn, handler.expires_in, changed_before=now - dt.timedelta(seconds=timeout)
            )
            rows += [s for s in stuck if s.id not in seen]
        return rows

    def judge(
        self,
        handler: SessionHandler,
        result: SessionResultT,
        rows: Sequence[SessionWithKernels],
        now: dt.datetime,
    ) -> list[SessionTransition]:
        return [_table_extras(handler, t) for t in judge(handler, result, rows, self._config, now)]

    def one_statement(self, changes: Sequence[SessionTransition]) -> bool:
        return moves_only(changes)

    async def write(self, conn: AsyncConnection, changes: Sequence[SessionTransition]) -> Applied:
        applied = await apply_session_transitions(conn, changes)
        kernels_moved = any(t.kernel_to is not None for t in changes if t.session_id in applied.applied)
        return Applied(
            moved={sid: (src.value, dst.value) for sid, (src, dst) in applied.moved.items()},
            events=applied.events(),
            changed=kernels_moved,
            # A replica started or ended: its route moves next.
            wake=frozenset({Hint.ROUTE}) if applied.replicas_moved else frozenset(),
            steps=[(src.value, dst.value) for _, src, dst in applied.steps()] if applied.via else None,
        )

    def outcome(self, change: SessionTransition) -> tuple[str, str]:
        return change.handler, change.result.value

    def count_move(self, src: str, dst: str) -> None:
        SESSION_TRANSITIONS.labels(from_status=src, to_status=dst).inc()
