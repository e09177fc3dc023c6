"""The coordinator spine over outcome-judged entities (deployments, routes), with the idle lane's
one look: which of its handlers' statuses any entity is in, so a lane of eight handlers over an
empty table costs a cycle one read, not eight (`Coordinator.present`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from sokovan.orchestrator.spine.coordinator import Coordinator
from sokovan.orchestrator.spine.outcome import OutcomeChange, OutcomeHandler, OutcomeKind, OutcomeResult

RowT = TypeVar("RowT", bound=Any)
HandlerT = TypeVar("HandlerT", bound=OutcomeHandler[Any, Any])


class OutcomeCoordinator(Coordinator[HandlerT, RowT, OutcomeChange[RowT], OutcomeResult]):
    kind: OutcomeKind[Any, Any]

    async def present(self, handlers: Sequence[HandlerT]) -> frozenset[str] | None:
        wanted = set().union(*(self.statuses_of(h) or frozenset() for h in handlers))
        if not wanted:
            return None
        async with self._reads.connect() as conn:
            return await self.kind.present(conn, sorted(wanted))

    def statuses_of(self, handler: HandlerT) -> frozenset[str] | None:
        if handler.always_runs:
            return None
        return frozenset(handler.reads if handler.reads is not None else handler.targets)
