"""NodeCoordinator: the coordinator spine over agents (the node lifecycle lane)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import Hint
from sokovan.bus.user_events import UserEventPublisher
from sokovan.orchestrator.locks import CycleLock
from sokovan.orchestrator.node.handler import AgentRow, NodeHandler, NodeResult
from sokovan.orchestrator.node.kind import NodeChange, NodeKind
from sokovan.orchestrator.spine.coordinator import Coordinator


class NodeCoordinator(Coordinator[NodeHandler, AgentRow, NodeChange, NodeResult]):
    def __init__(
        self,
        engine: AsyncEngine,
        lanes: Mapping[str, Sequence[NodeHandler]],
        lock: CycleLock | None = None,
        events: UserEventPublisher | None = None,
    ) -> None:
        super().__init__(Hint.NODE, NodeKind(), engine, lanes, lock, events)
