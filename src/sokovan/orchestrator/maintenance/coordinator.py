"""MaintenanceCoordinator: the long-cycle lane that keeps the cluster honest.

Each cycle: the planner's statistics of sessions and kernels are refreshed when a burst changed
them (`statistics`); kernels whose events seem lost are reconciled with their agents; live kernels
of ended sessions are ended and counted as drift, and processes agents still run for ended kernels
are destroyed; every `Retention.every` seconds, old terminal sessions are removed (`retention`); and
every few seconds the gauges of sessions and deployments by status are recounted (`census`).
Runs under its own cluster-wide lock, like every periodic task. (Agents that stop heartbeating are
the node lifecycle lane's: `orchestrator.node`.)"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import Hint
from sokovan.common.rpc import AgentRPCClient
from sokovan.config.cluster import ClusterConfig
from sokovan.orchestrator.locks import CycleLock, run_exclusive
from sokovan.orchestrator.maintenance.census import Census
from sokovan.orchestrator.maintenance.leak_repair import LeakRepair
from sokovan.orchestrator.maintenance.reconciler import KernelReconciler
from sokovan.orchestrator.maintenance.retention import Retention
from sokovan.orchestrator.maintenance.statistics import FreshStatistics


class MaintenanceCoordinator:
    name = Hint.MAINTENANCE

    def __init__(
        self,
        engine: AsyncEngine,
        rpc: AgentRPCClient,
        config: ClusterConfig,
        lock: CycleLock | None = None,
    ) -> None:
        self._config = config
        self._lock = lock
        self.reconciler = KernelReconciler(engine, rpc)
        self.leaks = LeakRepair(engine, rpc)
        self.retention = Retention(engine, lambda: config.retention.retention_days)
        self.census = Census(engine)
        self.statistics = FreshStatistics(engine)

    async def cycle(self) -> bool:
        return await run_exclusive(self._lock, self.name, self._cycle)

    async def _cycle(self) -> bool:
        await self.statistics.run()  # first: the reads below and the other lanes' plan with it
        await self.reconciler.run(self._config.maintenance.reconcile_after)
        ended = bool(await self.leaks.run())
        await self.retention.maybe_run()  # removes only what nothing reads: wakes no one
        await self.census.maybe_run()  # moves nothing
        return ended
