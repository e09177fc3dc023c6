"""MaintenanceCoordinator: the long-cycle lane that keeps the cluster honest.

Each cycle: agents that stopped heartbeating go DOWN and their kernels fail; kernels whose events
seem lost are reconciled with their agents; live kernels of ended sessions are ended and counted
as drift. Runs under its own cluster-wide lock, like every periodic task."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import Hint
from sokovan.bus.user_events import UserEventPublisher
from sokovan.common.rpc import AgentRPCClient
from sokovan.config.cluster import ClusterConfig
from sokovan.orchestrator.locks import CycleLock, run_exclusive
from sokovan.orchestrator.maintenance.leak_repair import LeakRepair
from sokovan.orchestrator.maintenance.lost_agents import LostAgentSweeper
from sokovan.orchestrator.maintenance.reconciler import KernelReconciler


class MaintenanceCoordinator:
    name = Hint.MAINTENANCE

    def __init__(
        self,
        engine: AsyncEngine,
        rpc: AgentRPCClient,
        config: ClusterConfig,
        lock: CycleLock | None = None,
        events: UserEventPublisher | None = None,
        backlog: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        self._config = config
        self._lock = lock
        self._backlog = backlog
        self.lost_agents = LostAgentSweeper(engine, events)
        self.reconciler = KernelReconciler(engine, rpc)
        self.leaks = LeakRepair(engine, rpc)

    async def cycle(self) -> bool:
        return await run_exclusive(self._lock, self.name, self._cycle)

    async def _cycle(self) -> bool:
        settings = self._config.maintenance
        backlog = await self._backlog() if self._backlog is not None else 0
        lost = await self.lost_agents.run(settings.agent_lost_timeout, backlog)
        await self.reconciler.run(settings.reconcile_after)
        repaired = await self.leaks.run()
        return bool(lost) or bool(repaired)
