"""What the manager's parts share at run time: connections, the hint channel, and the epoch of
what the admission caches hold."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field

import aetcd
import redis.asyncio as aioredis
import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import Hint, HintPublisher
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.settings import Settings
from sokovan.db.engine import autocommit
from sokovan.manager.peer_watch import PeerWatch

log = structlog.get_logger(__name__)


class CacheEpoch:
    """Moves on whenever what the admission caches hold (resource policies, projects, domains,
    scaling groups) may have changed: every cache filled under an older epoch is dropped at its
    next read."""

    def __init__(self) -> None:
        self.value = 0

    def bump(self) -> None:
        self.value += 1


@dataclass
class ManagerContext:
    settings: Settings
    engine: AsyncEngine
    redis: aioredis.Redis
    etcd: aetcd.Client
    hints: HintPublisher
    rpc: AgentRPCClient
    admission: CacheEpoch = field(default_factory=CacheEpoch)
    # What names this manager to the others, the same in all its worker processes (`daemon.serve`
    # hands it to them): what the limits on its event streams are counted under in Redis.
    manager_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # Whether PostgreSQL, Redis and etcd answer now (`peer_watch`); None where nothing probes them
    # (the API alone, in tests): the API's deadline is then the clock's alone.
    peers: PeerWatch | None = None

    @functools.cached_property
    def reads(self) -> AsyncEngine:
        """`engine` for reads that need no transaction (`db.engine.autocommit`): a GET costs its
        statements, not a BEGIN and a ROLLBACK round trip besides."""
        return autocommit(self.engine)

    async def admission_changed(self) -> None:
        """After an admin write that admission reads: this manager's caches are dropped now, every
        other manager's when the `ADMISSION` hint reaches it (a lost hint: within their TTL)."""
        self.admission.bump()
        try:
            await self.hints.hint(Hint.ADMISSION)
        except Exception:
            log.warning("could not publish the admission hint", exc_info=True)
