"""What the manager's parts share at run time: connections and the hint channel."""

from __future__ import annotations

from dataclasses import dataclass

import aetcd
import redis.asyncio as aioredis
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import HintPublisher
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.settings import Settings


@dataclass
class ManagerContext:
    settings: Settings
    engine: AsyncEngine
    redis: aioredis.Redis
    etcd: aetcd.Client
    hints: HintPublisher
    rpc: AgentRPCClient
