"""The routing table and the health reports, shared over Redis by the managers and the app proxies.

- The **routing table** is written by the route coordinator (ServiceDiscoverySync) and read by every
  proxy: per deployment, the HEALTHY routes traffic may go to, and every route whose replica runs,
  which the proxies probe. A change is announced on a channel; proxies also re-read it periodically.
- **Health reports** are written by the proxies after each probe (one hash field per route, with
  the time of the probe) and read by the route coordinator (HealthCheckRoute), which judges them.
  A report older than 3 probe intervals is stale: nobody is probing.
- **Proxies** register their public URL with a time-to-live, so a deployment can show its endpoint.

Every value is signed with the cluster secret, like every other message on the bus: a process
without it can neither steer traffic nor fake a replica's health.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from pydantic import BaseModel, Field, ValidationError

from sokovan.common.signing import sign, verify


class HealthCheck(BaseModel):
    """How a deployment's replicas are probed (seconds)."""

    path: str = Field(default="/health", pattern=r"^/", max_length=256)
    interval: float = Field(default=5.0, gt=0, le=3600)
    timeout: float = Field(default=2.0, gt=0, le=600)
    healthy_threshold: int = Field(default=2, ge=1, le=100)
    unhealthy_threshold: int = Field(default=3, ge=1, le=100)
    initial_delay: float = Field(default=0.0, ge=0, le=3600)


class ProbeTarget(BaseModel):
    route_id: uuid.UUID
    deployment: str
    endpoint: str
    health_check: HealthCheck
    # When the route's replica started running: probes wait `initial_delay` after it.
    since: float


class RoutingTable(BaseModel):
    generated_at: float
    # deployment name → endpoints of its HEALTHY routes
    routes: dict[str, list[str]] = Field(default_factory=dict)
    probes: list[ProbeTarget] = Field(default_factory=list)


class HealthReport(BaseModel):
    route_id: uuid.UUID
    consecutive_successes: int = 0
    consecutive_failures: int = 0
    last_checked_at: float  # epoch seconds
    last_status: str  # "200", "503", "timeout", "connection refused", ...
    ok: bool


@dataclass(frozen=True)
class RoutingBus:
    """Where the routing table and health reports live, and the secret that signs them."""

    redis: aioredis.Redis
    prefix: str
    secret: str


def table_key(prefix: str) -> str:
    return f"{prefix}:routing:table"


def table_channel(prefix: str) -> str:
    return f"{prefix}:routing:changed"


def health_key(prefix: str) -> str:
    return f"{prefix}:routing:health"


def proxies_key(prefix: str) -> str:
    return f"{prefix}:routing:proxies"


def _seal(secret: str, value: BaseModel) -> str:
    body = value.model_dump_json()
    return json.dumps({"body": body, "sig": sign(secret, body.encode())})


def _open(secret: str, raw: bytes | str | None) -> str | None:
    if raw is None:
        return None
    try:
        sealed = json.loads(raw)
        body = sealed["body"]
        return body if isinstance(body, str) and verify(secret, body.encode(), sealed.get("sig")) else None
    except (ValueError, KeyError, TypeError):
        return None


async def publish_table(redis: aioredis.Redis, prefix: str, secret: str, table: RoutingTable) -> None:
    await redis.set(table_key(prefix), _seal(secret, table))
    await redis.publish(table_channel(prefix), str(table.generated_at))


async def read_table(redis: aioredis.Redis, prefix: str, secret: str) -> RoutingTable | None:
    body = _open(secret, await redis.get(table_key(prefix)))
    try:
        return RoutingTable.model_validate_json(body) if body is not None else None
    except ValidationError:
        return None


async def write_reports(redis: aioredis.Redis, prefix: str, secret: str, reports: list[HealthReport]) -> None:
    if reports:
        await redis.hset(health_key(prefix), mapping={str(r.route_id): _seal(secret, r) for r in reports})


async def read_reports(
    redis: aioredis.Redis, prefix: str, secret: str, route_ids: list[uuid.UUID]
) -> dict[uuid.UUID, HealthReport]:
    if not route_ids:
        return {}
    raws: list[Any] = await redis.hmget(health_key(prefix), [str(r) for r in route_ids])
    out: dict[uuid.UUID, HealthReport] = {}
    for rid, raw in zip(route_ids, raws, strict=True):
        body = _open(secret, raw)
        if body is None:
            continue
        try:
            out[rid] = HealthReport.model_validate_json(body)
        except ValidationError:
            continue
    return out


async def forget_reports(redis: aioredis.Redis, prefix: str, route_ids: list[uuid.UUID]) -> None:
    if route_ids:
        await redis.hdel(health_key(prefix), *[str(r) for r in route_ids])


class ProxyRegistration(BaseModel):
    url: str
    at: float


async def register_proxy(redis: aioredis.Redis, prefix: str, secret: str, proxy_id: str, url: str) -> None:
    await redis.hset(proxies_key(prefix), proxy_id, _seal(secret, ProxyRegistration(url=url, at=time.time())))


async def unregister_proxy(redis: aioredis.Redis, prefix: str, proxy_id: str) -> None:
    await redis.hdel(proxies_key(prefix), proxy_id)


async def proxy_urls(redis: aioredis.Redis, prefix: str, secret: str, max_age: float = 30.0) -> list[str]:
    """The URLs of the proxies that registered within `max_age` seconds, oldest registration first."""
    raws: dict[Any, Any] = await redis.hgetall(proxies_key(prefix))
    now = time.time()
    found: list[ProxyRegistration] = []
    for raw in raws.values():
        body = _open(secret, raw)
        if body is None:
            continue
        try:
            reg = ProxyRegistration.model_validate_json(body)
        except ValidationError:
            continue
        if now - reg.at <= max_age:
            found.append(reg)
    return sorted({r.url for r in found})
