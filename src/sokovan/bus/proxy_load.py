"""What each app proxy measures, shared with the managers over Redis (CONTRACT section 12).

Every proxy writes, about once a second, one sealed value under its id in the hash
`<prefix>:routing:load`: per deployment (by id) the requests in flight, the requests per second
over the last few seconds and the requests held waiting for a replica (a deployment scaled to
zero); per replica endpoint the requests in flight (a draining route is terminated once no proxy
has one in flight on it). The managers sum the fresh values (`read_loads`): the autoscaler scales
on them, the route coordinator drains by them. A value older than `max_age` is a proxy that
stopped: it counts for nothing. Values are signed like the routing table (`routing._seal`), under
the kind "load" and the proxy's id, so nobody without the cluster secret can fake load.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from pydantic import BaseModel, Field, ValidationError

from sokovan.bus.routing import seal, unseal

LOAD = "load"
MAX_AGE = 5.0


class DeploymentLoad(BaseModel):
    inflight: int = 0
    rps: float = 0.0  # requests per second, over the proxy's last few seconds
    waiting: int = 0  # requests held for a replica to start (scale from zero)


class ProxyLoad(BaseModel):
    proxy_id: str
    at: float  # when measured (epoch seconds)
    # `generated_at` of the routing table in force when measured (None: none read yet): a route
    # that left the table is drained only by reports made under a table without it.
    table_at: float | None = None
    deployments: dict[uuid.UUID, DeploymentLoad] = Field(default_factory=dict)
    endpoints: dict[str, int] = Field(default_factory=dict)  # endpoint URL → requests in flight


@dataclass
class ClusterLoad:
    """Every fresh proxy's load, summed."""

    proxies: int = 0
    oldest: float | None = None  # the oldest `at` among the fresh values
    oldest_table: float | None = None  # the oldest `table_at` among them (None if one had none)
    deployments: dict[uuid.UUID, DeploymentLoad] = field(default_factory=dict)
    endpoints: dict[str, int] = field(default_factory=dict)


def load_key(prefix: str) -> str:
    return f"{prefix}:routing:load"


async def write_load(redis: aioredis.Redis, prefix: str, secret: str, load: ProxyLoad) -> None:
    await redis.hset(load_key(prefix), load.proxy_id, seal(secret, LOAD, load.proxy_id, load))


async def forget_load(redis: aioredis.Redis, prefix: str, proxy_id: str) -> None:
    await redis.hdel(load_key(prefix), proxy_id)


async def read_loads(
    redis: aioredis.Redis, prefix: str, secret: str, max_age: float = MAX_AGE
) -> ClusterLoad:
    raws: dict[Any, Any] = await redis.hgetall(load_key(prefix))
    now = time.time()
    total = ClusterLoad()
    for proxy_id, raw in raws.items():
        key = proxy_id.decode() if isinstance(proxy_id, bytes) else str(proxy_id)
        body = unseal(secret, LOAD, key, raw)
        if body is None:
            continue
        try:
            load = ProxyLoad.model_validate_json(body)
        except ValidationError:
            continue
        if load.proxy_id != key or now - load.at > max_age:
            continue
        first = total.proxies == 0
        total.proxies += 1
        total.oldest = load.at if total.oldest is None else min(total.oldest, load.at)
        if first:
            total.oldest_table = load.table_at
        elif total.oldest_table is not None:
            total.oldest_table = None if load.table_at is None else min(total.oldest_table, load.table_at)
        for dep, d in load.deployments.items():
            acc = total.deployments.setdefault(dep, DeploymentLoad())
            acc.inflight += d.inflight
            acc.rps += d.rps
            acc.waiting += d.waiting
        for endpoint, n in load.endpoints.items():
            total.endpoints[endpoint] = total.endpoints.get(endpoint, 0) + n
    return total
