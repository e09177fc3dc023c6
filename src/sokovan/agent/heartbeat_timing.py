"""How often an agent (or a hollow fleet) beats: its own `--heartbeat-interval`, or the cluster's.

Without the option, the interval is `heartbeat_interval` of the etcd section
`<prefix>/config/manager/node_lifecycle` (validated whole as `NodeLifecycleSettings`, like the
manager reads it), followed live: a change applies to the next beat. When the key is absent the
default is 10 s, and so it is while etcd cannot be reached: the agent starts and beats without
etcd, says so once in a warning, and keeps trying in the background.
"""

from __future__ import annotations

import asyncio

import aetcd
import structlog

from sokovan.common.settings import Settings
from sokovan.config.cluster import ClusterConfig, EtcdConfigWatcher, NodeLifecycleSettings

log = structlog.get_logger(__name__)

LOAD_TIMEOUT = 5.0
RETRY_MAX = 30.0  # longest pause between attempts to reach etcd before the first read


class HeartbeatInterval:
    """The seconds between heartbeats now: `fixed`, or the cluster's value (see `follow`)."""

    def __init__(self, settings: Settings, fixed: float | None) -> None:
        self.fixed = fixed
        self._settings = settings
        self._cluster = ClusterConfig()

    def current(self) -> float:
        if self.fixed is not None:
            return self.fixed
        return self._cluster.node_lifecycle.heartbeat_interval

    @property
    def source(self) -> str:
        return "option" if self.fixed is not None else "etcd"

    def timings(self) -> NodeLifecycleSettings:
        """The cluster's node-lifecycle timings as last read (the defaults until etcd answers): the
        agent's fence keeps the manager's clock with them (`fence`)."""
        return self._cluster.node_lifecycle

    async def follow(self) -> None:
        """Read the cluster's timings and follow their changes until cancelled (a fixed interval
        still follows the timeout and grace periods). Run it as a background task."""
        settings = self._settings
        client = aetcd.Client(host=settings.etcd_host, port=settings.etcd_port)
        watcher = EtcdConfigWatcher(client, settings.etcd_prefix, self._cluster)
        try:
            await self._first_read(watcher)
            await watcher.run(asyncio.Event())  # retries by itself if etcd goes away later
        finally:
            await client.close()

    async def _first_read(self, watcher: EtcdConfigWatcher) -> None:
        delay, warned = 1.0, False
        while True:
            try:
                await asyncio.wait_for(watcher.load(), LOAD_TIMEOUT)
            except Exception as exc:
                if not warned:
                    log.warning(
                        "agent.etcd_unreachable",
                        etcd=self._settings.etcd,
                        error=str(exc) or type(exc).__name__,
                        heartbeat_interval=self.current(),
                    )
                    warned = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            log.info("agent.heartbeat_interval", seconds=self.current(), source=self.source)
            return
